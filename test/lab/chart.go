package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/onepool/onepool/test/lab/pki"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab runs onepool's components as the ServiceAccounts, with the RBAC,
// that charts/onepool installs: the chart's RBAC templates are applied and
// each component gets a kubeconfig with a token of its ServiceAccount.
const (
	// ChartRelease is the release name the lab renders the chart with.
	ChartRelease = "onepool"
	// ControllerManagerSA and SchedulerSA are the chart's ServiceAccounts.
	ControllerManagerSA = "onepool-controller-manager"
	SchedulerSA         = "onepool-scheduler"
	// saTokenFor: the tokens the lab mints last this long; `up` mints new
	// ones when less than a day is left.
	saTokenFor = 72 * time.Hour
)

// ChartDir is charts/onepool in this checkout.
func ChartDir() (string, error) { return chartDir("onepool") }

// SlurmChartDir is charts/slurm in this checkout.
func SlurmChartDir() (string, error) { return chartDir("slurm") }

func chartDir(name string) (string, error) {
	top, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(top, "charts", name), nil
}

// Helm runs the lab's helm (built by `make tools`) with the lab's kubeconfig,
// within ctx's deadline, or 2 minutes when ctx has none.
func (l *Lab) Helm(ctx context.Context, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, filepath.Join(l.BinDir(), "helm"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+l.Kubeconfig(), "HELM_CACHE_HOME="+l.path("run", "helm", "cache"),
		"HELM_CONFIG_HOME="+l.path("run", "helm", "config"), "HELM_DATA_HOME="+l.path("run", "helm", "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// HelmTemplate renders charts/onepool as the lab installs it, with extra
// helm arguments (--set, --show-only...).
func (l *Lab) HelmTemplate(ctx context.Context, extra ...string) ([]byte, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	args := append([]string{"template", ChartRelease, dir, "--namespace", SystemNamespace,
		"-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--kube-version", "1.35.4"}, extra...)
	return l.Helm(ctx, args...)
}

// ensureChartRBAC applies the chart's ServiceAccounts and RBAC and writes
// each component's kubeconfig.
func (l *Lab) ensureChartRBAC(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(l.BinDir(), "helm")); err != nil {
		return fmt.Errorf("helm is not built: run `make tools`")
	}
	rbac, err := l.HelmTemplate(ctx, "--show-only", "templates/controller-manager-rbac.yaml", "--show-only", "templates/controller-manager-policy.yaml", "--show-only", "templates/scheduler-rbac.yaml", "--show-only", "templates/deviceclass.yaml", "--show-only", "templates/tenantpolicies.yaml")
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
	path := l.SAKubeconfig(sa)
	if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) < saTokenFor-24*time.Hour && l.saTokenWorks(ctx, sa) {
		return nil
	}
	secs := int64(saTokenFor / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of ServiceAccount %s/%s: %w", SystemNamespace, sa, err)
	}
	ca, err := os.ReadFile(l.pki().Path("ca.crt"))
	if err != nil {
		return err
	}
	body := pki.KubeconfigFor(l.APIServerURL(), ca, sa, SystemNamespace, [2]string{"token", tr.Status.Token})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// saTokenWorks tells whether the apiserver still takes sa's token: one of
// a ServiceAccount that was deleted (helm uninstall) and made again is not.
func (l *Lab) saTokenWorks(ctx context.Context, sa string) bool {
	c, err := l.SAClient(sa)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err == nil
}

// SAClient is a clientset acting as one of the chart's ServiceAccounts.
func (l *Lab) SAClient(sa string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.SAKubeconfig(sa))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", sa, err)
	}
	return kubernetes.NewForConfig(cfg)
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

// SchedulerConfig is the KubeSchedulerConfiguration replica 0 runs with.
func (l *Lab) SchedulerConfig() ([]byte, error) { return os.ReadFile(l.schedulerConfigPath(0)) }
