package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab/charts"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab runs onepool's components as the ServiceAccounts, with the RBAC,
// that charts/onepool installs: the chart's RBAC templates are applied and
// each component gets a kubeconfig with a token of its ServiceAccount.
// Package charts holds the charts' names and commands; these are the lab's
// uses of them.
const (
	// ChartRelease is the release name the lab renders the chart with.
	ChartRelease = charts.Release
	// ControllerManagerSA and SchedulerSA are the chart's ServiceAccounts.
	ControllerManagerSA = charts.ControllerManagerSA
	SchedulerSA         = charts.SchedulerSA
	// saTokenFor: the tokens the lab mints last this long; `up` mints new
	// ones when less than a day is left.
	saTokenFor = 72 * time.Hour
)

func (l *Lab) helm() charts.Helm {
	return charts.Helm{Bin: filepath.Join(l.BinDir(), "helm"), Kubeconfig: l.Kubeconfig(), Home: l.path("run", "helm")}
}

// Helm runs the lab's helm (built by `make tools`) with the lab's kubeconfig,
// within ctx's deadline, or 2 minutes when ctx has none.
func (l *Lab) Helm(ctx context.Context, args ...string) ([]byte, error) {
	return l.helm().Run(ctx, args...)
}

// HelmTemplate renders charts/onepool as the lab installs it, with extra
// helm arguments (--set, --show-only...).
func (l *Lab) HelmTemplate(ctx context.Context, extra ...string) ([]byte, error) {
	dir, err := charts.Dir("onepool")
	if err != nil {
		return nil, err
	}
	return l.Helm(ctx, charts.TemplateArgs(dir, extra...)...)
}

// ensureChartRBAC applies the chart's ServiceAccounts and RBAC and writes
// each component's kubeconfig.
func (l *Lab) ensureChartRBAC(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(l.BinDir(), "helm")); err != nil {
		return fmt.Errorf("helm is not built: run `make tools`")
	}
	rbac, err := l.HelmTemplate(ctx, "--show-only", "templates/controller-manager-rbac.yaml", "--show-only", "templates/controller-manager-policy.yaml", "--show-only", "templates/mig-layout-policy.yaml", "--show-only", "templates/scheduler-rbac.yaml", "--show-only", "templates/deviceclass.yaml", "--show-only", "templates/tenantpolicies.yaml", "--show-only", "templates/metrics-rbac.yaml")
	if err != nil {
		return err
	}
	f := l.path("run", "chart-rbac.yaml")
	if err := os.WriteFile(f, rbac, 0o644); err != nil {
		return err
	}
	if err := rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
		l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "apply", "--server-side", "--force-conflicts", "-f", f); err != nil {
		return err
	}
	// Helm's ownership marks (the templates carry its label already): a
	// `helm install` of the chart (InstallChart) adopts these objects.
	if err := rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
		l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "annotate", "--overwrite", "-f", f,
		"meta.helm.sh/release-name="+ChartRelease, "meta.helm.sh/release-namespace="+SystemNamespace); err != nil {
		return err
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	for _, sa := range []string{ControllerManagerSA, SchedulerSA} {
		if err := l.ensureSAKubeconfig(ctx, kc, sa); err != nil {
			return err
		}
	}
	return nil
}

// SAKubeconfig is the kubeconfig of one of the chart's ServiceAccounts.
func (l *Lab) SAKubeconfig(sa string) string { return l.path("run", sa+".kubeconfig") }

// ensureSAKubeconfig writes a kubeconfig with a fresh token of sa unless
// the one there lasts another day.
func (l *Lab) ensureSAKubeconfig(ctx context.Context, kc kubernetes.Interface, sa string) error {
	ca, err := os.ReadFile(l.pki().Path("ca.crt"))
	if err != nil {
		return err
	}
	return charts.ServiceAccountKubeconfig{Path: l.SAKubeconfig(sa), Name: sa, APIServer: l.APIServerURL(), CA: ca, Lifetime: saTokenFor}.Ensure(ctx, kc)
}

// SAClient is a clientset acting as one of the chart's ServiceAccounts.
func (l *Lab) SAClient(sa string) (kubernetes.Interface, error) {
	return charts.ClientFor(l.SAKubeconfig(sa), sa)
}

// DaemonCmdline is the command line of a running lab daemon, by its name
// (e.g. "onepool-controller-manager").
func (l *Lab) DaemonCmdline(name string) ([]string, error) {
	pid, prog := l.procs.ReadPid(name)
	if pid == 0 || !proc.Alive(pid, prog) {
		return nil, fmt.Errorf("%s is not running", name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// DaemonRSS is the resident memory (VmRSS, bytes) of a running lab
// daemon, by its name.
func (l *Lab) DaemonRSS(name string) (int64, error) {
	pid, prog := l.procs.ReadPid(name)
	if pid == 0 || !proc.Alive(pid, prog) {
		return 0, fmt.Errorf("%s is not running", name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q: %w", name, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s (pid %d): no VmRSS", name, pid)
}

// SchedulerConfig is the KubeSchedulerConfiguration replica 0 runs with.
func (l *Lab) SchedulerConfig() ([]byte, error) { return os.ReadFile(l.schedulerConfigPath(0)) }
