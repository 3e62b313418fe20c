// Package requeue is how onepool's controllers retry a failed reconcile.
package requeue

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxDelay caps the wait before a failing object is looked at again.
// controller-runtime's default grows to 1000 s: an object whose Slurm
// update failed through a minute of slurmrestd errors would then wait
// about 15 minutes after Slurm answers again, unless some other event came.
const MaxDelay = 30 * time.Second

// Limiter is controller-runtime's default rate limiter (per object 5 ms
// doubling; overall 10 per second, bursts of 100) with each object's delay
// capped at MaxDelay.
func Limiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
