package charts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The slurm chart as the lab installs it: release "slurm" in namespace
// "slurm", every pod on the real node (charts/slurm/ci/lab-values.yaml), a
// second Slurm cluster beside the lab's own, with its own munge key, JWT key
// and database.
const (
	SlurmRelease   = "slurm"
	SlurmNamespace = "slurm"
)

// SlurmContainers are the main containers of the slurm chart's pods, by
// component label.
var SlurmContainers = map[string]string{
	"slurmctld":  "slurmctld",
	"slurmrestd": "slurmrestd",
	"slurmdbd":   "slurmdbd",
	"login":      "login",
	"slurmd":     "slurmd",
	"mariadb":    "mariadb",
}

// SlurmNode is where the lab's real node keeps what the slurm chart's pods
// mount from the host.
type SlurmNode struct {
	// JailHostPath is the jail's root on the host.
	JailHostPath string
	// KubeletDir is the kubelet's root (the DRA driver registers there) and
	// CDIDir the container runtime's CDI directory.
	KubeletDir, CDIDir string
}

// SlurmUpgradeArgs is `helm upgrade --install` of charts/slurm (in dir) with
// the lab's values, the jail on at the node's jail root, and extra
// arguments (--set, --wait, ...). With --wait it also waits for the
// chart's Jobs (--wait-for-jobs): the accounting Job has made the users'
// associations and the QOS when it returns, so a user can submit at once.
func SlurmUpgradeArgs(dir string, n SlurmNode, extra ...string) []string {
	args := []string{"upgrade", "--install", SlurmRelease, dir, "--namespace", SlurmNamespace, "--create-namespace",
		"-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--wait-for-jobs",
		"--set", "jail.enabled=true", "--set", "jail.hostPath=" + n.JailHostPath,
		// The lab's rootfs is a private mount: the kubelet refuses
		// HostToContainer under it.
		"--set", "jail.mountPropagation=None",
		// The agents register their DRA driver with the lab kubelet, whose
		// root is not /var/lib/kubelet.
		"--set", "dra.kubeletDir=" + n.KubeletDir, "--set", "dra.cdiDir=" + n.CDIDir}
	return append(args, extra...)
}

// SlurmUninstallArgs is `helm uninstall --wait` of the slurm release; a
// release already gone is no error.
func SlurmUninstallArgs() []string {
	return []string{"uninstall", SlurmRelease, "--namespace", SlurmNamespace, "--ignore-not-found", "--wait", "--timeout", "2m"}
}

// SlurmPod is the first Running pod of a slurm chart component (slurmctld,
// slurmrestd, slurmdbd, login, slurmd, mariadb).
func SlurmPod(ctx context.Context, kc kubernetes.Interface, component string) (*corev1.Pod, error) {
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

// SinfoNodeArgs is the sinfo command whose output SinfoNodeStates reads.
var SinfoNodeArgs = []string{"sinfo", "-h", "-N", "-o", "%N %T"}

// SinfoNodeStates reads SinfoNodeArgs' output: node → state.
func SinfoNodeStates(out []byte) (map[string]string, error) {
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
