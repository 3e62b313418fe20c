package lab

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/charts"
)

// The slurm chart as the lab installs it (package charts): a second Slurm
// cluster beside the lab's own (chroot processes), every pod on the real node.
const (
	SlurmRelease   = charts.SlurmRelease
	SlurmNamespace = charts.SlurmNamespace
	// SlurmChartNode is the NodeSet pod's Slurm node: the real node.
	SlurmChartNode = RealNodeName
)

// InstallSlurmChart runs `helm upgrade --install` of charts/slurm with the
// lab's values, the jail on (the lab's jail directory on the host, which is
// the real node), and extra arguments (--set, --wait, ...).
func (l *Lab) InstallSlurmChart(ctx context.Context, extra ...string) ([]byte, error) {
	if !RealKubeletEnabled() {
		return nil, fmt.Errorf("the slurm chart's pods need the real node: set %s=1", EnvRealKubelet)
	}
	dir, err := charts.Dir("slurm")
	if err != nil {
		return nil, err
	}
	// The admin's step: the namespace holds NodeSets, where onepool's
	// controller manager may make pods.
	c, err := l.Client()
	if err != nil {
		return nil, err
	}
	if err := ServeNodeSets(ctx, c, SlurmNamespace); err != nil {
		return nil, err
	}
	return l.Helm(ctx, charts.SlurmUpgradeArgs(dir, charts.SlurmNode{
		JailHostPath: filepath.Join(l.RootFS(), JailRoot), KubeletDir: l.NodeKubeletDir(), CDIDir: l.NodeCDIDir()}, extra...)...)
}

// UninstallSlurmChart removes the release and then its namespace, with what
// helm keeps on purpose (the munge, JWT and database Secrets) and the
// StatefulSets' PVCs: the next install starts from nothing. It waits until
// the namespace is gone (bounded by ctx).
func (l *Lab) UninstallSlurmChart(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, SlurmNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	if out, err := l.Helm(ctx, charts.SlurmUninstallArgs()...); err != nil {
		return fmt.Errorf("helm uninstall: %w: %s", err, out)
	}
	if err := kc.CoreV1().Namespaces().Delete(ctx, SlurmNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		_, err := kc.CoreV1().Namespaces().Get(ctx, SlurmNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still there: %w", SlurmNamespace, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// SlurmChartPod is the first Running pod of a slurm chart component
// (slurmctld, slurmrestd, slurmdbd, login, slurmd, mariadb).
func (l *Lab) SlurmChartPod(ctx context.Context, component string) (*corev1.Pod, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return nil, err
	}
	return charts.SlurmPod(ctx, kc, component)
}

// SlurmChartExec runs a command in a slurm chart component's container
// (kubectl exec) and returns its stdout; stderr goes into the error.
func (l *Lab) SlurmChartExec(ctx context.Context, component string, argv ...string) ([]byte, error) {
	container, ok := charts.SlurmContainers[component]
	if !ok {
		return nil, fmt.Errorf("no slurm chart component %q", component)
	}
	return l.SlurmChartExecIn(ctx, component, container, argv...)
}

// SlurmChartExecIn runs argv in a named container of a component's pod
// (the slurmd pod's "dra", say).
func (l *Lab) SlurmChartExecIn(ctx context.Context, component, container string, argv ...string) ([]byte, error) {
	pod, err := l.SlurmChartPod(ctx, component)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", l.Kubeconfig(), "exec", "-n", SlurmNamespace, pod.Name, "-c", container, "--"}, argv...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, l.Kubectl(), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), pod.Name, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// SlurmChartAsUser runs a shell command as an ordinary user in the login
// pod (su - user), the way a user on a login node would.
func (l *Lab) SlurmChartAsUser(ctx context.Context, user, command string) ([]byte, error) {
	return l.SlurmChartExec(ctx, "login", "su", "-", user, "-c", command)
}

// SlurmChartNodeStates is `sinfo -N` of the chart's Slurm: node → state.
func (l *Lab) SlurmChartNodeStates(ctx context.Context) (map[string]string, error) {
	out, err := l.SlurmChartExec(ctx, "login", charts.SinfoNodeArgs...)
	if err != nil {
		return nil, err
	}
	return charts.SinfoNodeStates(out)
}
