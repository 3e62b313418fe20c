package charts

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Pods are the live pods of one of the chart's Deployments.
func Pods(ctx context.Context, kc kubernetes.Interface, deploy string) ([]corev1.Pod, error) {
	l, err := kc.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: InstanceSelector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, deploy+"-") && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// RolledOut tells whether every replica of the chart's Deployments is
// updated, Ready and available with no old pod left, and says what it saw.
func RolledOut(ctx context.Context, kc kubernetes.Interface) (bool, string) {
	var states []string
	done := true
	for _, name := range Deployments {
		d, err := kc.AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := Pods(ctx, kc, name)
		if err != nil {
			return false, err.Error()
		}
		want, s := *d.Spec.Replicas, d.Status
		done = done && s.ObservedGeneration >= d.Generation && s.Replicas == want && s.UpdatedReplicas == want &&
			s.ReadyReplicas == want && s.AvailableReplicas == want && len(pods) == int(want)
		states = append(states, fmt.Sprintf("%s: generation %d/%d, replicas %d updated %d ready %d available %d; pods: %s",
			name, s.ObservedGeneration, d.Generation, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, PodStates(pods)))
	}
	return done, strings.Join(states, " | ")
}

// PodStates is what `kubectl get pods` shows of pods, on one line.
func PodStates(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		st := string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				st += "/" + cs.State.Waiting.Reason
			}
			st += fmt.Sprintf(" ready=%v restarts=%d", cs.Ready, cs.RestartCount)
		}
		s = append(s, p.Name+"@"+p.Spec.NodeName+": "+st)
	}
	return strings.Join(s, "; ")
}

// Leader is the pod of deploy that holds lease ("" when none does).
func Leader(ctx context.Context, kc kubernetes.Interface, deploy, lease string) (string, error) {
	l, err := kc.CoordinationV1().Leases(Namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	pods, err := Pods(ctx, kc, deploy)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		// kube-scheduler and controller-runtime name themselves <hostname>_<uuid>.
		if strings.HasPrefix(*l.Spec.HolderIdentity, p.Name+"_") {
			return p.Name, nil
		}
	}
	return "", nil
}

// PodLogs is the end of the logs of the chart's pods that are not
// Ready or have restarted (the previous container's too): what an admin
// would read with `kubectl logs --previous` when a rollout hangs.
func PodLogs(ctx context.Context, kc kubernetes.Interface) string {
	var b strings.Builder
	tail := int64(12)
	for _, name := range Deployments {
		pods, err := Pods(ctx, kc, name)
		if err != nil {
			fmt.Fprintf(&b, "\n%s: %v", name, err)
			continue
		}
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready && cs.RestartCount == 0 {
					continue
				}
				for _, prev := range []bool{true, false} {
					if prev && cs.RestartCount == 0 {
						continue
					}
					lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					out, err := kc.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
						Container: cs.Name, Previous: prev, TailLines: &tail}).DoRaw(lctx)
					cancel()
					if err != nil {
						out = []byte(err.Error())
					}
					if cs.LastTerminationState.Terminated != nil && prev {
						t := cs.LastTerminationState.Terminated
						fmt.Fprintf(&b, "\n--- %s/%s previous (exit %d, %s):", p.Name, cs.Name, t.ExitCode, t.Reason)
					} else {
						fmt.Fprintf(&b, "\n--- %s/%s previous=%v:", p.Name, cs.Name, prev)
					}
					fmt.Fprintf(&b, "\n%s", strings.TrimSpace(string(out)))
				}
			}
		}
	}
	return b.String()
}
