package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab/charts"
	"github.com/onepool/onepool/test/lab/controlplane"
)

// Ports of onepool's own components in the lab.
const (
	ManagerMetricsPort = 26080
	ManagerProbePort   = 26081
	// ManagerPprofPort serves the controller manager's Go profiles
	// (127.0.0.1 only): the scale benchmark's heap profiles.
	ManagerPprofPort = 26089
	// SystemNamespace holds onepool's leader lease in the lab.
	SystemNamespace = charts.Namespace
	// NotReadyGrace is the syncer's grace for a not-Ready slurmd pod in the lab.
	NotReadyGrace = 10 * time.Second
	// HostSlurmdNodes selects the lab's host-slurmd Nodes (the README's
	// selector): a test that labels a Node so makes it one.
	HostSlurmdNodes = keys.LabelSlurmdOnHost + "=true"
	// StaleAfter is how long the lab's controller manager trusts its last good Slurm refresh.
	StaleAfter = 10 * time.Second
)

func (l *Lab) onepoolSteps() []step {
	steps := []step{
		{"components mode", l.checkChartMode},
		{"onepool namespace", l.ensureSystemNamespace},
		// The controller manager watches NodeSets: their CRD comes first.
		{"crds", l.ensureCRDs},
	}
	if !ChartMode() {
		// A release a chart-mode run left behind would run beside the
		// processes (and its uninstall takes the RBAC with it).
		steps = append(steps, step{"no chart release", l.ensureNoChartRelease})
	}
	steps = append(steps, step{"chart rbac", l.ensureChartRBAC})
	steps = append(steps, l.componentSteps()...)
	return append(steps, step{"workload controllers", l.startWorkloadControllers}, step{"gpu node drivers", l.startStaticDRA})
}

func (l *Lab) ensureSystemNamespace(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (l *Lab) controllerManager() daemon {
	return daemon{
		Name: "onepool-controller-manager",
		Argv: []string{filepath.Join(l.BinDir(), "onepool-controller-manager"),
			// As the chart's ServiceAccount, with the chart's RBAC.
			"--kubeconfig", l.SAKubeconfig(ControllerManagerSA),
			"--slurmrest-url", l.ComponentRESTURL(), "--slurmrest-token-file", l.TokenFile(),
			"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ManagerMetricsPort),
			"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ManagerProbePort),
			"--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", ManagerPprofPort),
			"--leader-elect-namespace", SystemNamespace,
			// Short lease: a killed leader is replaced within seconds in
			// tests. Not shorter: a leader that cannot renew within the
			// deadline exits (as it must), and on this 2-core machine under
			// load the apiserver has been seen to answer a renewal in over
			// 3 s; the lab has no Deployment to restart it.
			"--leader-elect-lease-duration", "8s", "--leader-elect-renew-deadline", "6s", "--leader-elect-retry-period", "500ms",
			"--not-ready-grace", NotReadyGrace.String(),
			"--host-slurmd-nodes", HostSlurmdNodes,
			// Tests wait for "unknown"; 10 s instead of 30 s keeps them short.
			"--slurm-stale-after", StaleAfter.String(),
			"--webhook-port", fmt.Sprint(ManagerWebhookPort), "--webhook-host", "127.0.0.1", "--webhook-cert-dir", l.webhookCertDir(),
			"--default-tenant-policy", DefaultTenantPolicy,
			// Debug level 1: the syncer's decisions that change something
			// or leave a drain alone are in the log a failed run keeps.
			"--zap-log-level=1",
		},
		Port: ManagerMetricsPort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// StartControllerManager starts onepool's controller manager (or keeps the
// running one when its binary has not been rebuilt since) and waits until it
// is ready.
func (l *Lab) StartControllerManager(ctx context.Context) error {
	if ChartMode() {
		return l.scaleChart(ctx, charts.Deployments[0], ChartReplicas)
	}
	return l.startControllerManager(ctx, "readyz")
}

// StartControllerManagerLive starts the controller manager process like
// StartControllerManager but waits only until it is alive (/healthz), for
// tests of a manager that must not turn Ready.
func (l *Lab) StartControllerManagerLive(ctx context.Context) error {
	return l.startControllerManager(ctx, "healthz")
}

func (l *Lab) startControllerManager(ctx context.Context, probe string) error {
	d := l.controllerManager()
	if err := l.startOwn(d, false, func() error { return l.procs.Stop(d.Name) }); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 60*time.Second, filepath.Join(l.LogDir(), "onepool-controller-manager.out"), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/%s", ManagerProbePort, probe))
	})
}

// ControllerManagerProbe GETs the controller manager's /healthz or /readyz
// (verbose) and returns the HTTP status and body.
func (l *Lab) ControllerManagerProbe(ctx context.Context, probe string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/%s?verbose", ManagerProbePort, probe), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body), err
}

// ComponentRESTURL is the slurmrestd URL onepool's components are given:
// RESTURL(), or what SetComponentRESTURL set.
func (l *Lab) ComponentRESTURL() string {
	if l.componentREST != "" {
		return l.componentREST
	}
	return l.RESTURL()
}

// SetComponentRESTURL points onepool's controller manager and scheduler
// (replica 0) at url ("" for slurmrestd itself), restarting them: a test
// puts a fault-injecting proxy in front of slurmrestd this way. A later
// lab up (in another process) puts them back on slurmrestd.
func (l *Lab) SetComponentRESTURL(ctx context.Context, url string) error {
	if ChartMode() {
		return fmt.Errorf("the chart's components take slurmrestd's URL from the chart's values")
	}
	l.componentREST = url
	if err := l.StartControllerManager(ctx); err != nil {
		return err
	}
	return l.StartSchedulerReplica(ctx, 0)
}

// startOwn starts one of the lab's own daemons (proc.Supervisor.StartOwn).
func (l *Lab) startOwn(d daemon, configChanged bool, stop func() error) error {
	return l.procs.StartOwn(d, configChanged, stop)
}

// StopControllerManager stops it gracefully (it hands its lease back).
// With the chart (ChartMode) its Deployment is scaled to 0.
func (l *Lab) StopControllerManager() error {
	if ChartMode() {
		return l.scaleChart(context.Background(), charts.Deployments[0], 0)
	}
	return l.procs.Stop("onepool-controller-manager")
}

// KillControllerManager kills it with SIGKILL, as a crash would.
// With the chart (ChartMode): the containers of all its pods.
func (l *Lab) KillControllerManager() error {
	if ChartMode() {
		return l.killChartPods(context.Background(), charts.Deployments[0])
	}
	return l.KillDaemon(l.controllerManager().Name)
}

// ControllerManagerMetricsURL is where its Prometheus metrics are: HTTPS,
// to callers allowed to get /metrics (ScrapeMetrics).
func (l *Lab) ControllerManagerMetricsURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d/metrics", ManagerMetricsPort)
}
