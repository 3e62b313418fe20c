package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Ports of onepool's scheduler in the lab.
const (
	SchedulerPort = 26259 // kube-scheduler's secure port (healthz, metrics)
	ReleasePort   = 26270 // where placeholder scripts ask whether their pod is gone
)

// schedulerConfig is the KubeSchedulerConfiguration of the lab's onepool
// scheduler: one profile, onepool, with Slurm doing preemption.
func (l *Lab) schedulerConfig() string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
profiles:
- schedulerName: onepool
  plugins:
    multiPoint:
      enabled:
      - name: Onepool
    postFilter:
      disabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: Onepool
    args:
      apiVersion: onepool.dev/v1alpha1
      kind: OnepoolArgs
      slurmrestURL: %s
      tokenFile: %s
      staleAfter: %s
      releaseListenAddress: 127.0.0.1:%d
      releaseURL: http://127.0.0.1:%d
`, l.Kubeconfig(), l.RESTURL(), l.TokenFile(), StaleAfter, ReleasePort, ReleasePort)
}

func (l *Lab) scheduler() daemon {
	return daemon{
		name: "onepool-scheduler",
		argv: []string{filepath.Join(l.BinDir(), "onepool-scheduler"),
			"--config", l.path("run", "scheduler-config.yaml"),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(SchedulerPort),
			"--cert-dir", l.path("run", "scheduler-certs"), "--v", "2"},
		port: SchedulerPort,
		env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// StartScheduler starts onepool's scheduler (restarting it when its binary
// or config changed) and waits until it is healthy.
func (l *Lab) StartScheduler(ctx context.Context) error {
	changed, err := writeIfChanged(l.path("run", "scheduler-config.yaml"), l.schedulerConfig())
	if err != nil {
		return err
	}
	if err := l.startOwn(l.scheduler(), changed, l.StopScheduler); err != nil {
		return err
	}
	return l.waitScheduler(ctx)
}

func (l *Lab) waitScheduler(ctx context.Context) error {
	// Its serving certificate is self-signed; only liveness is read here.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // lab health probe
	return l.awaitDaemon(ctx, l.scheduler(), 60*time.Second, filepath.Join(l.LogDir(), "onepool-scheduler.out"), func(ctx context.Context) error {
		return httpOK(ctx, c, fmt.Sprintf("https://127.0.0.1:%d/healthz", SchedulerPort))
	})
}

// StopScheduler stops it (kube-scheduler takes a few seconds to exit) and
// waits until its ports are free.
func (l *Lab) StopScheduler() error {
	if err := l.stopDaemon("onepool-scheduler"); err != nil {
		return err
	}
	for i := 0; i < 100; i++ {
		if portFree(SchedulerPort) == nil && portFree(ReleasePort) == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("onepool-scheduler stopped but its ports are still taken")
}

// ensureCRDs installs scheduler-plugins' PodGroup CRD (fetched by `make
// tools` into the lab dir) so gangs can be tested, and onepool's own CRDs
// (config/crd/bases, made by `make generate`) when the checkout has them.
func (l *Lab) ensureCRDs(ctx context.Context) error {
	crd := l.path("podgroup-crd.yaml")
	if _, err := os.Stat(crd); err != nil {
		return fmt.Errorf("%s is missing: run `make tools`", crd)
	}
	files := []string{crd}
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
		return runLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
			append([]string{l.Kubectl(), "--kubeconfig", l.Kubeconfig()}, args...)...)
	}
	// --force-conflicts: a CRD regenerated since the last `up` replaces the old one.
	if err := kubectl(append([]string{"apply", "--server-side", "--force-conflicts"}, fileArgs...)...); err != nil {
		return err
	}
	return kubectl(append([]string{"wait", "--for=condition=Established", "--timeout=50s"}, fileArgs...)...)
}
