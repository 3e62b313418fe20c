package tokenevents

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"k8s.io/client-go/tools/events"

	"github.com/onepool/onepool/slurmrest"
)

func TestReporter(t *testing.T) {
	env := map[string]string{"POD_NAME": "onepool-scheduler-7d9", "POD_NAMESPACE": "onepool-system"}
	pod := OwnPod(func(k string) string { return env[k] })
	if assert.NotNil(t, pod) {
		assert.Equal(t, "onepool-scheduler-7d9", pod.Name)
		assert.Equal(t, "onepool-system", pod.Namespace)
	}
	assert.Nil(t, OwnPod(func(string) string { return "" }), "outside a pod: no pod to speak of")

	rec := events.NewFakeRecorder(10)
	report := Reporter(rec, pod, logr.Discard())
	report(slurmrest.TokenProblem{Kind: slurmrest.TokenExpiring, Message: "the slurmrestd token expires soon"})
	report(slurmrest.TokenProblem{Kind: slurmrest.TokenRefused, Message: "slurmrestd refused onepool's token (HTTP 401)"})
	assert.Equal(t, "Warning SlurmTokenExpiring the slurmrestd token expires soon", <-rec.Events)
	assert.Equal(t, "Warning SlurmTokenRefused slurmrestd refused onepool's token (HTTP 401)", <-rec.Events)

	// Without a pod: logged only, no event.
	Reporter(rec, nil, logr.Discard())(slurmrest.TokenProblem{Kind: slurmrest.TokenRefused, Message: "x"})
	assert.Empty(t, rec.Events)
}
