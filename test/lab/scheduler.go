package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/charts"
	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// Ports of onepool's scheduler in the lab. Replica i serves kube-scheduler's
// secure port on SchedulerPort+i and its release endpoint on
// ReleasePort+1+i; ReleasePort is the "Service" in front of the replicas
// (the lab's service proxy, round robin over those that accept), which is
// the release URL every placeholder script is given.
const (
	SchedulerPort = 26259 // replica 0's secure port (healthz, metrics)
	ReleasePort   = 26270 // where placeholder scripts ask whether their pod is gone
	// SchedulerReplicas the lab can run; the second runs only while a test
	// starts it (StartSchedulerReplica).
	SchedulerReplicas = 2
	// SchedulerLease is the scheduler replicas' leader lease (in SystemNamespace).
	SchedulerLease = charts.SchedulerLease
	// PlaceholderKeySecret holds the key the scheduler signs its
	// placeholders' comments with (in SystemNamespace; the chart's name).
	PlaceholderKeySecret = "onepool-scheduler-placeholder-key"
	// DefaultTenantPolicy covers the namespaces no other policy does (the
	// lab's per-test namespaces): charts/onepool/ci/lab-values.yaml.
	DefaultTenantPolicy = "lab-default"
)

// schedulerConfig is the KubeSchedulerConfiguration of the lab's onepool
// scheduler replica i: one profile, onepool, with Slurm doing preemption;
// leader election on its own lease, as the chart configures it.
func (l *Lab) schedulerConfig(i int) string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 200
  burst: 400
leaderElection:
  leaderElect: true
  resourceNamespace: %s
  resourceName: %s
  # As the controller manager's: short enough for failover tests, long
  # enough that a leader on this loaded 2-core machine keeps renewing.
  leaseDuration: 8s
  renewDeadline: 6s
  retryPeriod: 500ms
profiles:
- schedulerName: onepool
  plugins:
    multiPoint:
      enabled:
      - name: Onepool
      # Slurm allocates GPUs; onepool writes the claims (PreBind).
      disabled:
      - name: DynamicResources
    postFilter:
      disabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: Onepool
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: OnepoolArgs
      slurmrestURL: %s
      tokenFile: %s
      placeholderKeySecret: %s/%s
      defaultTenantPolicy: %s
      staleAfter: %s
      releaseListenAddress: 127.0.0.1:%d
      releaseURL: http://127.0.0.1:%d
      immediateAllocation: true
`, l.SAKubeconfig(SchedulerSA), SystemNamespace, SchedulerLease, l.ComponentRESTURL(), l.TokenFile(), SystemNamespace, PlaceholderKeySecret, DefaultTenantPolicy, StaleAfter, ReleasePort+1+i, ReleasePort)
}

func schedulerName(i int) string {
	if i == 0 {
		return "onepool-scheduler"
	}
	return fmt.Sprintf("onepool-scheduler-%d", i)
}

func (l *Lab) schedulerConfigPath(i int) string {
	if i == 0 {
		return l.path("run", "scheduler-config.yaml")
	}
	return l.path("run", fmt.Sprintf("scheduler-%d-config.yaml", i))
}

func (l *Lab) scheduler(i int) daemon {
	return daemon{
		Name: schedulerName(i),
		Argv: []string{filepath.Join(l.BinDir(), "onepool-scheduler"),
			"--config", l.schedulerConfigPath(i),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(SchedulerPort + i),
			"--cert-dir", l.path("run", schedulerName(i)+"-certs"), "--v", "2",
			// Benchmarks read the plugin's metrics and Go's heap
			// profiles; the port listens on 127.0.0.1 only.
			"--authorization-always-allow-paths", "/healthz,/readyz,/livez,/metrics,/debug/pprof/*"},
		Port: SchedulerPort + i,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// schedulerService is the lab's stand-in for the chart's release Service.
func (l *Lab) schedulerService() daemon {
	to := make([]string, SchedulerReplicas, SchedulerReplicas+1)
	for i := range to {
		to[i] = fmt.Sprintf("127.0.0.1:%d", ReleasePort+1+i)
	}
	// The chart's release Service, when the chart's scheduler runs as pods.
	to = append(to, fmt.Sprintf("endpoints:%s/%s-scheduler-release/release", SystemNamespace, ChartRelease))
	return daemon{
		Name: "scheduler-service",
		Argv: []string{filepath.Join(l.BinDir(), "lab"), "service-proxy",
			fmt.Sprintf("127.0.0.1:%d", ReleasePort), strings.Join(to, ",")},
		Port: ReleasePort,
		// It reads EndpointSlices with the lab's kubeconfig: the lab's own dir,
		// whatever the working directory.
		Env: []string{"PATH=/usr/bin:/bin", "ONEPOOL_LAB_DIR=" + l.cfg.Dir, rootfs.EnvSlurm + "=" + l.Release().Name},
	}
}

// StartScheduler starts onepool's scheduler replica 0 (restarting it when
// its binary or config changed) and its release Service, and waits until
// it is healthy.
// With the chart (ChartMode) it scales the scheduler's Deployment back up.
func (l *Lab) StartScheduler(ctx context.Context) error {
	if err := l.startSchedulerService(); err != nil {
		return err
	}
	if ChartMode() {
		return l.scaleChart(ctx, charts.Deployments[1], ChartReplicas)
	}
	return l.StartSchedulerReplica(ctx, 0)
}

// startSchedulerService starts the release Service stand-in.
func (l *Lab) startSchedulerService() error {
	svc := l.schedulerService()
	if l.procs.Running(svc) != 0 {
		return nil
	}
	_, err := l.procs.Start(svc)
	return err
}

// StartSchedulerReplica starts replica i (0 or 1) and waits until it is
// healthy (a standby is healthy too).
func (l *Lab) StartSchedulerReplica(ctx context.Context, i int) error {
	changed, err := rootfs.WriteIfChanged(l.schedulerConfigPath(i), l.schedulerConfig(i))
	if err != nil {
		return err
	}
	if err := l.startOwn(l.scheduler(i), changed, func() error { return l.StopSchedulerReplica(i) }); err != nil {
		return err
	}
	// Its serving certificate is self-signed; only liveness is read here.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // lab health probe
	return l.procs.Await(ctx, l.scheduler(i), 60*time.Second, filepath.Join(l.LogDir(), schedulerName(i)+".out"), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, c, fmt.Sprintf("https://127.0.0.1:%d/healthz", SchedulerPort+i))
	})
}

// StopScheduler stops replica 0 (kube-scheduler hands its lease back and
// takes a few seconds to exit) and waits until its ports are free.
// With the chart (ChartMode) it scales the scheduler's Deployment to 0.
func (l *Lab) StopScheduler() error {
	if ChartMode() {
		return l.scaleChart(context.Background(), charts.Deployments[1], 0)
	}
	return l.StopSchedulerReplica(0)
}

// StopSchedulerReplica stops replica i and waits until its ports are free.
func (l *Lab) StopSchedulerReplica(i int) error {
	if err := l.procs.Stop(schedulerName(i)); err != nil {
		return err
	}
	for range 100 {
		if proc.PortFree(SchedulerPort+i) == nil && proc.PortFree(ReleasePort+1+i) == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s stopped but its ports are still taken", schedulerName(i))
}

// KillSchedulerReplica kills replica i with SIGKILL, as a crash would: its
// lease stays held until it expires.
func (l *Lab) KillSchedulerReplica(i int) error { return l.KillDaemon(schedulerName(i)) }

// SchedulerLeader is the replica (0 or 1) that holds the scheduler's lease
// now, read from the Lease's holder: kube-scheduler's identity is
// "<hostname>_<uuid>", the same hostname for both lab replicas, so the
// replica is the running one whose last "Leader election" log line names
// that identity.
func (l *Lab) SchedulerLeader(ctx context.Context) (int, string, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return 0, "", err
	}
	lease, err := kc.CoordinationV1().Leases(SystemNamespace).Get(ctx, SchedulerLease, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return 0, "", fmt.Errorf("no scheduler replica holds lease %s", SchedulerLease)
	}
	id := *lease.Spec.HolderIdentity
	for i := range SchedulerReplicas {
		if l.procs.Running(l.scheduler(i)) != 0 && lastIdentity(filepath.Join(l.LogDir(), schedulerName(i)+".out")) == id {
			return i, id, nil
		}
	}
	return 0, id, fmt.Errorf("lease holder %q is no running replica's", id)
}

// ensureCRDs installs scheduler-plugins' PodGroup CRD and the workload
// controllers' (fetched by `make tools` into the lab dir) so gangs can be tested, and
// onepool's own CRDs (config/crd/bases, made by `make generate`) when the
// checkout has them.
func (l *Lab) ensureCRDs(ctx context.Context) error {
	var files []string
	names := []string{"podgroup-crd.yaml"}
	for _, w := range workloadControllers {
		names = append(names, w.CRD)
	}
	for _, name := range names {
		crd := l.path(name)
		if _, err := os.Stat(crd); err != nil {
			return fmt.Errorf("%s is missing: run `make tools`", crd)
		}
		files = append(files, crd)
	}
	if top, err := repoRoot(); err == nil {
		own, err := filepath.Glob(filepath.Join(top, "config", "crd", "bases", "*.yaml"))
		if err != nil {
			return err
		}
		files = append(files, own...)
	}
	var fileArgs []string
	for _, f := range files {
		fileArgs = append(fileArgs, "-f", f)
	}
	kubectl := func(args ...string) error {
		return rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
			append([]string{l.Kubectl(), "--kubeconfig", l.Kubeconfig()}, args...)...)
	}
	// --force-conflicts: a CRD regenerated since the last `up` replaces the old one.
	if err := kubectl(append([]string{"apply", "--server-side", "--force-conflicts"}, fileArgs...)...); err != nil {
		return err
	}
	// kubectl wait on a CRD created a moment ago can fail at once
	// (".status.conditions accessor error: <nil>", before the API server
	// wrote any status): asked again, a few times, it waits as it should.
	var err error
	for try := 0; try < 5; try++ {
		if err = kubectl(append([]string{"wait", "--for=condition=Established", "--timeout=50s"}, fileArgs...)...); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
	return err
}

// lastIdentity is the identity in a scheduler log's last "Leader election" line.
func lastIdentity(log string) string {
	b, err := os.ReadFile(log)
	if err != nil {
		return ""
	}
	id := ""
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"Leader election"`) {
			continue
		}
		if _, rest, ok := strings.Cut(line, `identity="`); ok {
			id, _, _ = strings.Cut(rest, `"`)
		}
	}
	return id
}
