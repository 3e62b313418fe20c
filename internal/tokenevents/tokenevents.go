// Package tokenevents tells a component's operators about its Slurm token:
// a warning in its log and, where the component knows its own pod, a
// Warning event on that pod (kubectl describe pod, and any event alert).
package tokenevents

import (
	"os"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// OwnPod is the pod the component runs in, from the downward API's
// POD_NAME and POD_NAMESPACE; nil outside a pod (or without them).
func OwnPod(getenv func(string) string) *corev1.Pod {
	name, ns := getenv("POD_NAME"), getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

// Reporter is a slurmrest.Config.OnTokenProblem: each problem logged and,
// with a pod and a recorder, a Warning event on the pod.
func Reporter(rec events.EventRecorder, pod *corev1.Pod, log logr.Logger) func(slurmrest.TokenProblem) {
	return func(p slurmrest.TokenProblem) {
		reason := keys.EventSlurmTokenExpiring
		if p.Kind == slurmrest.TokenRefused {
			reason = keys.EventSlurmTokenRefused
		}
		log.Info("the Slurm token needs attention", "reason", reason, "problem", p.Message)
		if rec != nil && pod != nil {
			rec.Eventf(pod, nil, corev1.EventTypeWarning, reason, keys.ActionAuthenticate, "%s", p.Message)
		}
	}
}

// FromEnv is Reporter for the pod the environment names.
func FromEnv(rec events.EventRecorder, log logr.Logger) func(slurmrest.TokenProblem) {
	return Reporter(rec, OwnPod(os.Getenv), log)
}
