package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The lab installs charts/onepool for real (helm install, the components as
// pods from onepool's images on the real node) only when a test asks: the
// lab's own components run as processes otherwise. InstallChart stops those
// processes first (the chart's replicas take over their leases) and
// RestoreProcesses brings them back after an uninstall.

// ChartTokenSecret holds the lab's slurmrestd token for the chart (values
// slurm.tokenSecret.name in ci/lab-values.yaml).
const ChartTokenSecret = "slurm-token"

// ChartValues are the values files the lab installs the chart with.
func ChartValues() ([]string, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(dir, "ci", "lab-values.yaml"), filepath.Join(dir, "ci", "lab-node-values.yaml")}, nil
}

// InstallChart runs `helm upgrade --install` of charts/onepool into
// SystemNamespace with the lab's values and extra helm arguments, after it
// has stopped the lab's own controller manager and scheduler processes and
// written the token Secret. It does not wait: callers watch what they
// measure (helm's --wait can be passed in extra).
func (l *Lab) InstallChart(ctx context.Context, extra ...string) ([]byte, error) {
	if !RealKubeletEnabled() {
		return nil, fmt.Errorf("the chart's pods need the real node: set %s=1", EnvRealKubelet)
	}
	if err := errors.Join(l.StopSchedulerReplica(1), l.StopSchedulerReplica(0), l.procs.Stop("onepool-controller-manager")); err != nil {
		return nil, err
	}
	// The stopped controller manager served the process mode's GPU webhook:
	// the chart registers its own.
	if err := l.unregisterGPUWebhook(ctx); err != nil {
		return nil, err
	}
	if err := l.ensureTokenSecret(ctx); err != nil {
		return nil, err
	}
	return l.HelmUpgrade(ctx, extra...)
}

// HelmUpgrade runs `helm upgrade --install` with the lab's values and extra
// arguments (e.g. --set, --wait).
func (l *Lab) HelmUpgrade(ctx context.Context, extra ...string) ([]byte, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	values, err := ChartValues()
	if err != nil {
		return nil, err
	}
	args := []string{"upgrade", "--install", ChartRelease, dir, "--namespace", SystemNamespace}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	return l.Helm(ctx, append(args, extra...)...)
}

// UninstallChart runs `helm uninstall --wait`.
func (l *Lab) UninstallChart(ctx context.Context) ([]byte, error) {
	return l.Helm(ctx, "uninstall", ChartRelease, "--namespace", SystemNamespace, "--wait", "--timeout", "90s")
}

// RestoreProcesses brings the lab's own components back as processes: the
// chart's RBAC (gone with an uninstall), fresh ServiceAccount tokens, the
// controller manager and the scheduler.
func (l *Lab) RestoreProcesses(ctx context.Context) error {
	return l.runSteps(ctx, []step{
		{"chart rbac", l.ensureChartRBAC},
		{"controller-mgr", l.StartControllerManager},
		{"gpu webhook", l.registerGPUWebhook},
		{"scheduler", l.StartScheduler},
	})
}

// ensureTokenSecret writes the lab's slurmrestd token into the Secret the
// chart mounts.
func (l *Lab) ensureTokenSecret(ctx context.Context) error {
	token, err := os.ReadFile(l.TokenFile())
	if err != nil {
		return fmt.Errorf("slurmrestd token: %w", err)
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ChartTokenSecret, Namespace: SystemNamespace},
		Data:       map[string][]byte{"token": token},
	}
	_, err = kc.CoreV1().Secrets(SystemNamespace).Update(ctx, s, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = kc.CoreV1().Secrets(SystemNamespace).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", SystemNamespace, ChartTokenSecret, err)
	}
	return nil
}

// ChartDeployments are the chart's Deployments as the lab installs it.
var ChartDeployments = []string{ChartRelease + "-controller-manager", ChartRelease + "-scheduler"}

// ChartLeases are the leader leases of those Deployments, in that order.
var ChartLeases = []string{"onepool-controller-manager", SchedulerLease}

// ChartInstanceSelector selects every object of the lab's release.
const ChartInstanceSelector = "app.kubernetes.io/instance=" + ChartRelease

// ChartPods are the live pods of one of the chart's Deployments.
func ChartPods(ctx context.Context, kc kubernetes.Interface, deploy string) ([]corev1.Pod, error) {
	l, err := kc.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: ChartInstanceSelector})
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

// ChartRolledOut tells whether every replica of the chart's Deployments is
// updated, Ready and available with no old pod left, and says what it saw.
func ChartRolledOut(ctx context.Context, kc kubernetes.Interface) (bool, string) {
	var states []string
	done := true
	for _, name := range ChartDeployments {
		d, err := kc.AppsV1().Deployments(SystemNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := ChartPods(ctx, kc, name)
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

// ChartLeader is the pod of deploy that holds lease ("" when none does).
func ChartLeader(ctx context.Context, kc kubernetes.Interface, deploy, lease string) (string, error) {
	l, err := kc.CoordinationV1().Leases(SystemNamespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	pods, err := ChartPods(ctx, kc, deploy)
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

// KillPodContainers SIGKILLs the containers of a pod on the real node
// through containerd, as a crash would (the kubelet then restarts them).
func (l *Lab) KillPodContainers(ctx context.Context, pod *corev1.Pod) error {
	for _, cs := range pod.Status.ContainerStatuses {
		id, ok := strings.CutPrefix(cs.ContainerID, "containerd://")
		if !ok {
			return fmt.Errorf("pod %s: container %s has no containerd id (%q)", pod.Name, cs.Name, cs.ContainerID)
		}
		if out, err := l.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
			return fmt.Errorf("pod %s: ctr tasks kill %s: %w: %s", pod.Name, id, err, out)
		}
	}
	return nil
}

// ContainerMemory is a pod's containers' memory as the kubelet reports it
// (its summary API, read through the apiserver): working set and RSS bytes.
func (l *Lab) ContainerMemory(ctx context.Context, namespace, pod string) (workingSet, rss uint64, err error) {
	kc, err := l.KubeClient()
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", RealNodeName, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("kubelet summary of %s: %w", RealNodeName, err)
	}
	var sum struct {
		Pods []struct {
			PodRef     struct{ Name, Namespace string } `json:"podRef"`
			Containers []struct {
				Memory *struct {
					WorkingSetBytes *uint64 `json:"workingSetBytes"`
					RSSBytes        *uint64 `json:"rssBytes"`
				} `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		return 0, 0, fmt.Errorf("kubelet summary: %w", err)
	}
	for _, p := range sum.Pods {
		if p.PodRef.Name != pod || p.PodRef.Namespace != namespace {
			continue
		}
		for _, c := range p.Containers {
			if c.Memory == nil || c.Memory.WorkingSetBytes == nil {
				return 0, 0, fmt.Errorf("kubelet summary: pod %s/%s has no memory figures yet", namespace, pod)
			}
			workingSet += *c.Memory.WorkingSetBytes
			if c.Memory.RSSBytes != nil {
				rss += *c.Memory.RSSBytes
			}
		}
		return workingSet, rss, nil
	}
	return 0, 0, fmt.Errorf("kubelet summary: no pod %s/%s", namespace, pod)
}

// ChartPodLogs is the end of the logs of the chart's pods that are not
// Ready or have restarted (the previous container's too): what an admin
// would read with `kubectl logs --previous` when a rollout hangs.
func ChartPodLogs(ctx context.Context, kc kubernetes.Interface) string {
	var b strings.Builder
	tail := int64(12)
	for _, name := range ChartDeployments {
		pods, err := ChartPods(ctx, kc, name)
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
