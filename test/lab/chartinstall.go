package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/charts"
)

// The lab installs charts/onepool for real (helm install, the components as
// pods from onepool's images on the real node) only when a test asks: the
// lab's own components run as processes otherwise. InstallChart stops those
// processes first (the chart's replicas take over their leases) and
// RestoreProcesses brings them back after an uninstall.

// ChartTokenSecret holds the lab's slurmrestd token for the chart (values
// slurm.tokenSecret.name in ci/lab-values.yaml).
const ChartTokenSecret = charts.TokenSecret

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
	dir, err := charts.Dir("onepool")
	if err != nil {
		return nil, err
	}
	return l.Helm(ctx, charts.UpgradeArgs(dir, extra...)...)
}

// UninstallChart runs `helm uninstall --wait`.
func (l *Lab) UninstallChart(ctx context.Context) ([]byte, error) {
	return l.Helm(ctx, charts.UninstallArgs()...)
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

// KillPodContainers SIGKILLs the containers of a pod on the real node
// through containerd, as a crash would (the kubelet then restarts them).
func (l *Lab) KillPodContainers(ctx context.Context, pod *corev1.Pod) error {
	return l.realNode().KillPodContainers(ctx, pod)
}

// ContainerMemory is a pod's containers' memory as the kubelet reports it
// (its summary API, read through the apiserver): working set and RSS bytes.
func (l *Lab) ContainerMemory(ctx context.Context, namespace, pod string) (workingSet, rss uint64, err error) {
	return l.realNode().ContainerMemory(ctx, namespace, pod)
}
