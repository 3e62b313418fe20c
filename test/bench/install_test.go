package bench

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// TestBenchInstall installs charts/onepool with helm on the lab's real node
// (1,000 kwok Nodes beside it) and times helm install until the first
// onepool pod is bound through Slurm, and a SIGKILL of the scheduler
// leader's container until the next pod is bound; then the idle memory of
// both leaders as the kubelet reports it.
func TestBenchInstall(t *testing.T) {
	requireBench(t)
	if !lab.RealKubeletEnabled() {
		t.Fatalf("the chart's pods need the real node: %s=1 (make bench-install sets it)", lab.EnvRealKubelet)
	}
	l := lab.Shared(t)
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	uninstall := func() {
		if _, err := l.Helm(ctx, "status", lab.ChartRelease, "-n", lab.SystemNamespace); err == nil {
			if out, err := l.UninstallChart(ctx); err != nil {
				t.Errorf("helm uninstall: %v: %s", err, out)
			}
		}
	}
	cleanupSchedBench(t, kc, sc)
	uninstall()
	t.Cleanup(func() {
		cleanupSchedBench(t, kc, sc)
		uninstall()
		if err := l.RestoreProcesses(ctx); err != nil {
			t.Errorf("the lab's own components: %v", err)
		}
	})
	w := watchSchedPods(t, kc)

	start := time.Now()
	if out, err := l.InstallChart(ctx); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	createGPUPod(t, kc, "install-first")
	at := w.waitBound(t, "install-first", 5*time.Minute)
	report("install_to_first_pod_bound_s", at.Sub(start).Seconds(), "s")
	eventually(t, 3*time.Minute, "the chart's Deployments rolled out", func() (bool, string) { return charts.RolledOut(ctx, kc) })

	// Idle: a minute after both leaders hold their leases.
	leaders := make([]string, len(charts.Deployments))
	for i, d := range charts.Deployments {
		eventually(t, time.Minute, d+" has a leader pod", func() (bool, string) {
			leaders[i], err = charts.Leader(ctx, kc, d, charts.Leases[i])
			return err == nil && leaders[i] != "", "no leader pod"
		})
	}
	time.Sleep(time.Minute)
	for i, name := range []string{"controller_manager_rss_mib", "scheduler_rss_mib"} {
		ws, rss, err := l.ContainerMemory(ctx, lab.SystemNamespace, leaders[i])
		if err != nil {
			t.Fatal(err)
		}
		report(name, float64(rss)/(1<<20), "MiB")
		t.Logf("%s (%s): working set %.1f MiB, RSS %.1f MiB", leaders[i], name, float64(ws)/(1<<20), float64(rss)/(1<<20))
	}

	// Failover: SIGKILL of the scheduler leader's container, then a pod.
	leader := schedulerLeaderPod(t, kc, leaders[1])
	start = time.Now()
	if err := l.KillPodContainers(ctx, leader); err != nil {
		t.Fatal(err)
	}
	createGPUPod(t, kc, "after-failover")
	at = w.waitBound(t, "after-failover", 2*time.Minute)
	report("scheduler_failover_s", at.Sub(start).Seconds(), "s")
	now, _ := charts.Leader(ctx, kc, charts.Deployments[1], charts.Leases[1])
	t.Logf("scheduler leader %s killed; leader now %s", leader.Name, now)
}

func schedulerLeaderPod(t *testing.T, kc kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	p, err := kc.CoreV1().Pods(lab.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
