package requeue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestLimiterCapsTheDelay(t *testing.T) {
	l := Limiter()
	item := reconcile.Request{}
	item.Name = "slurmd-gpu-0"
	first := l.When(item)
	assert.LessOrEqual(t, first, MaxDelay)
	for range 40 { // 5 ms * 2^40 would be years
		assert.LessOrEqual(t, l.When(item), MaxDelay)
	}
	assert.Equal(t, MaxDelay, l.When(item))
	l.Forget(item)
	assert.Less(t, l.When(item), MaxDelay, "a success starts over")
}
