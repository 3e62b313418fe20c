package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/charts"
)

// EnvComponents set to "chart" makes the lab run onepool's controller
// manager and scheduler as charts/onepool installs them (helm, pods from
// onepool's images on the real node, ONEPOOL_LAB_REAL_KUBELET=1) instead
// of as processes; the e2e suites then test the installed product.
const EnvComponents = "ONEPOOL_LAB_COMPONENTS"

// ChartMode tells whether the lab's components are the chart's pods.
func ChartMode() bool { return os.Getenv(EnvComponents) == "chart" }

// ChartReplicas is how many replicas each of the chart's Deployments has
// (the chart's default).
const ChartReplicas = 2

// chartLabSettings are the lab's timings, the ones its processes run with:
// the tests wait on them.
func chartLabSettings() []string {
	var args []string
	for _, kv := range []string{
		"controllerManager.notReadyGrace=" + NotReadyGrace.String(),
		"controllerManager.hostSlurmd.nodeSelector=" + HostSlurmdNodes,
		"slurm.staleAfter=" + StaleAfter.String(),
		"controllerManager.leaderElection.leaseDuration=8s", "controllerManager.leaderElection.renewDeadline=6s",
		"controllerManager.leaderElection.retryPeriod=500ms",
		"scheduler.leaderElection.leaseDuration=8s", "scheduler.leaderElection.renewDeadline=6s",
		"scheduler.leaderElection.retryPeriod=500ms",
		// The lab's slurmd run onepool's release epilog.
		"scheduler.immediateAllocation=true",
	} {
		args = append(args, "--set", kv)
	}
	return args
}

// componentSteps are the steps that run onepool's own components: the
// processes, or (ChartMode) nothing here and the chart after the node.
func (l *Lab) componentSteps() []step {
	if ChartMode() {
		return []step{{"no lab webhook", l.unregisterGPUWebhook}}
	}
	return []step{
		{"webhook cert", l.ensureWebhookCert},
		{"controller-mgr", l.StartControllerManager},
		{"gpu webhook", l.registerGPUWebhook},
		{"lab kubelet", l.StartKubelet},
		{"scheduler", l.StartScheduler},
	}
}

// chartSteps install the chart (ChartMode only; after the real node).
func (l *Lab) chartSteps() []step {
	if !ChartMode() {
		return nil
	}
	return []step{
		{"lab kubelet", l.StartKubelet},
		{"chart install", l.installChartComponents},
	}
}

func (l *Lab) checkChartMode(context.Context) error {
	if ChartMode() && !RealKubeletEnabled() {
		return fmt.Errorf("%s=chart needs the real node: set %s=1 too", EnvComponents, EnvRealKubelet)
	}
	return nil
}

func (l *Lab) installChartComponents(ctx context.Context) error {
	if err := l.startSchedulerService(); err != nil {
		return err
	}
	if out, err := l.InstallChart(ctx, chartLabSettings()...); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return l.awaitChart(ctx)
}

// awaitChart waits until both Deployments are rolled out and a pod of each
// holds its lease.
func (l *Lab) awaitChart(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done, state := charts.RolledOut(ctx, kc)
		if done {
			for i, d := range charts.Deployments {
				if leader, err := charts.Leader(ctx, kc, d, charts.Leases[i]); err != nil || leader == "" {
					done, state = false, fmt.Sprintf("no pod of %s holds lease %s yet (%v)", d, charts.Leases[i], err)
				}
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the chart's components are not up after 3 min: %s%s", state, charts.PodLogs(ctx, kc))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ensureNoChartRelease uninstalls the lab's release if one is left.
func (l *Lab) ensureNoChartRelease(ctx context.Context) error {
	if _, err := l.Helm(ctx, "status", ChartRelease, "--namespace", SystemNamespace); err != nil {
		return nil // none (or no helm yet: nothing can have installed one)
	}
	if out, err := l.UninstallChart(ctx); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// scaleChart sets the replicas of one of the chart's Deployments and, for
// 0, waits until its pods are gone; otherwise until the chart is up.
func (l *Lab) scaleChart(ctx context.Context, deploy string, replicas int32) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: deploy, Namespace: SystemNamespace}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if _, err := kc.AppsV1().Deployments(SystemNamespace).UpdateScale(ctx, deploy, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scale %s to %d: %w", deploy, replicas, err)
	}
	if replicas > 0 {
		return l.awaitChart(ctx)
	}
	for {
		pods, err := charts.Pods(ctx, kc, deploy)
		if err == nil && len(pods) == 0 {
			// Terminating pods are not listed by ChartPods: wait for those too.
			all, err := kc.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: charts.InstanceSelector})
			if err == nil && countPrefix(all.Items, deploy+"-") == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s scaled to 0 but its pods are still there: %w", deploy, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// killChartPods SIGKILLs the containers of every pod of a Deployment.
func (l *Lab) killChartPods(ctx context.Context, deploy string) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	pods, err := charts.Pods(ctx, kc, deploy)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("no pod of %s runs", deploy)
	}
	var errs []error
	for i := range pods {
		errs = append(errs, l.KillPodContainers(ctx, &pods[i]))
	}
	return errors.Join(errs...)
}

func countPrefix(pods []corev1.Pod, prefix string) int {
	n := 0
	for _, p := range pods {
		if strings.HasPrefix(p.Name, prefix) {
			n++
		}
	}
	return n
}
