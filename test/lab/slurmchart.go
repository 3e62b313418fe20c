package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The slurm chart as the lab installs it: release "slurm" in namespace
// "slurm", every pod on the real node (charts/slurm/ci/lab-values.yaml).
// It is a second Slurm cluster beside the lab's own (chroot processes),
// with its own munge key, JWT key and database.
const (
	SlurmRelease   = "slurm"
	SlurmNamespace = "slurm"
	// SlurmChartNode is the NodeSet pod's Slurm node: the real node.
	SlurmChartNode = RealNodeName
)

// Containers of the slurm chart's pods, by component label.
var slurmChartContainers = map[string]string{
	"slurmctld":  "slurmctld",
	"slurmrestd": "slurmrestd",
	"slurmdbd":   "slurmdbd",
	"login":      "login",
	"slurmd":     "slurmd",
	"mariadb":    "mariadb",
}

// InstallSlurmChart runs `helm upgrade --install` of charts/slurm with the
// lab's values, the jail on (the lab's jail directory on the host, which is
// the real node), and extra arguments (--set, --wait, ...).
func (l *Lab) InstallSlurmChart(ctx context.Context, extra ...string) ([]byte, error) {
	if !RealKubeletEnabled() {
		return nil, fmt.Errorf("the slurm chart's pods need the real node: set %s=1", EnvRealKubelet)
	}
	dir, err := SlurmChartDir()
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
	args := []string{"upgrade", "--install", SlurmRelease, dir, "--namespace", SlurmNamespace, "--create-namespace",
		"-f", filepath.Join(dir, "ci", "lab-values.yaml"),
		"--set", "jail.enabled=true", "--set", "jail.hostPath=" + filepath.Join(l.RootFS(), JailRoot),
		// The lab's rootfs is a private mount: the kubelet refuses
		// HostToContainer under it.
		"--set", "jail.mountPropagation=None",
		// The agents register their DRA driver with the lab kubelet, whose
		// root is not /var/lib/kubelet.
		"--set", "dra.kubeletDir=" + l.nodePath("kubelet"), "--set", "dra.cdiDir=" + l.NodeCDIDir()}
	return l.Helm(ctx, append(args, extra...)...)
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
	if out, err := l.Helm(ctx, "uninstall", SlurmRelease, "--namespace", SlurmNamespace, "--ignore-not-found", "--wait", "--timeout", "2m"); err != nil {
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
	pods, err := kc.CoreV1().Pods(SlurmNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + SlurmRelease + ",app.kubernetes.io/component=" + component})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no running %s pod of the slurm chart (%d pods)", component, len(pods.Items))
}

// SlurmChartExec runs a command in a slurm chart component's container
// (kubectl exec) and returns its stdout; stderr goes into the error.
func (l *Lab) SlurmChartExec(ctx context.Context, component string, argv ...string) ([]byte, error) {
	container, ok := slurmChartContainers[component]
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
	out, err := l.SlurmChartExec(ctx, "login", "sinfo", "-h", "-N", "-o", "%N %T")
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			states[f[0]] = f[1]
		}
	}
	if len(states) == 0 {
		return nil, errors.New("sinfo shows no node")
	}
	return states, nil
}
