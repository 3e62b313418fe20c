package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab"
)

// TestBenchSlurmChart installs charts/slurm on the lab's real node from
// nothing (no release, no PVCs, no keys) and measures
//   - slurm_chart_install_to_sinfo_idle_s: helm install → every NodeSet
//     node IDLE in sinfo (as the login pod sees it);
//   - slurmctld_restart_to_ready_s: slurmctld's pod deleted → scontrol
//     ping UP from the login pod with the queued job still there.
func TestBenchSlurmChart(t *testing.T) {
	requireBench(t)
	if !lab.RealKubeletEnabled() {
		t.Fatalf("the slurm chart's pods need the real node: %s=1 (make bench-slurm-chart sets it)", lab.EnvRealKubelet)
	}
	l := lab.Shared(t)
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	uninstall := func() {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if err := l.UninstallSlurmChart(ctx); err != nil {
			t.Errorf("uninstall: %v", err)
		}
	}
	uninstall()
	t.Cleanup(uninstall)

	start := time.Now()
	installCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	if out, err := l.InstallSlurmChart(installCtx); err != nil {
		t.Fatalf("helm install: %v: %s", err, out)
	}
	waitFor(t, 5*time.Minute, "every NodeSet node idle", func() bool {
		st, err := l.SlurmChartNodeStates(ctx)
		return err == nil && st[lab.SlurmChartNode] == "idle"
	})
	report("slurm_chart_install_to_sinfo_idle_s", time.Since(start).Seconds(), "s")

	// The accounting Job makes the user's association (the install
	// above does not wait for Jobs).
	var id string
	waitFor(t, 3*time.Minute, "alice can submit from the login pod", func() bool {
		job, err := l.SlurmChartAsUser(ctx, lab.JailUser, "cd /tmp && sbatch --parsable --hold --wrap true")
		id = strings.TrimSpace(string(job))
		return err == nil
	})
	old, err := l.SlurmChartPod(ctx, "slurmctld")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := kc.CoreV1().Pods(lab.SlurmNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "slurmctld back with the queue", func() bool {
		if p, err := l.SlurmChartPod(ctx, "slurmctld"); err != nil || p.UID == old.UID {
			return false
		}
		out, err := l.SlurmChartExec(ctx, "login", "squeue", "-h", "-j", id, "-o", "%T")
		return err == nil && strings.TrimSpace(string(out)) == "PENDING"
	})
	report("slurmctld_restart_to_ready_s", time.Since(start).Seconds(), "s")
}

// waitFor polls ok every 100 ms (the resolution of the times measured
// with it) until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
