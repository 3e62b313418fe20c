package lab

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodCommand(t *testing.T) {
	l := &Lab{cfg: Config{Dir: t.TempDir()}}
	k := &kubelet{l: l}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-dyn-3", Namespace: "ns", UID: "u-1"},
		Spec: corev1.PodSpec{NodeName: "dyn-3", Containers: []corev1.Container{
			{Name: "sidecar", Command: []string{"/bin/false"}},
			{Name: "slurmd", Command: []string{"/usr/local/bin/onepool-node-agent"}, Args: []string{"run"}, Env: []corev1.EnvVar{
				{Name: "ONEPOOL_SLURM_FEATURES", Value: "lab-dyn"},
				{Name: "ONEPOOL_SLURM_NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "ONEPOOL_SLURMD_PORT", Value: "1"}, // the lab's port wins
			}},
		}},
	}
	var logged []string
	mk, err := k.podCommand(pod, func(f string, a ...any) { logged = append(logged, f) })
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := mk()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Path != "/usr/local/bin/onepool-node-agent" || !slices.Equal(cmd.Args, []string{"/usr/local/bin/onepool-node-agent", "run"}) {
		t.Errorf("path %s args %q", cmd.Path, cmd.Args)
	}
	if cmd.SysProcAttr.Chroot != l.RootFS() || !cmd.SysProcAttr.Setpgid || cmd.Dir != "/" {
		t.Errorf("not chrooted in its own group: %+v dir %s", cmd.SysProcAttr, cmd.Dir)
	}
	env := strings.Join(cmd.Env, "\n") + "\n"
	for _, want := range []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin\n", "ONEPOOL_SLURM_FEATURES=lab-dyn\n", "ONEPOOL_SLURM_NODE_NAME=dyn-3\n",
		"POD=slurmd-dyn-3\n", "ONEPOOL_GPU_INVENTORY=/etc/onepool/fake-gpus.json\n", "ONEPOOL_CONF_DIR=/run/onepool/dyn-3/slurm\n",
		"ONEPOOL_STATE_DIR=/run/onepool/dyn-3\n", "ONEPOOL_LAB_KUBELET_POD=u-1\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	// exec keeps the last of duplicate keys: the lab's port must come last.
	if i, j := strings.Index(env, "ONEPOOL_SLURMD_PORT=1\n"), strings.Index(env, "ONEPOOL_SLURMD_PORT=26953\n"); j < 0 || j < i {
		t.Errorf("the lab's port does not override the pod's:\n%s", env)
	}
	if strings.Contains(env, "IP=") || len(logged) != 1 {
		t.Errorf("status.podIP: want it left out with one log line; env:\n%s\nlogged %q", env, logged)
	}

	pod.Spec.Containers[1].Command = nil
	if _, err := k.podCommand(pod, t.Logf); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Errorf("a container without command: err %v", err)
	}
	pod.Spec.Containers[1].Command, pod.Spec.NodeName = []string{"/usr/sbin/slurmd"}, "gpu-0"
	if _, err := k.podCommand(pod, t.Logf); err == nil {
		t.Error("a pod on a node without a lab slurmd port started")
	}
}

func TestInstallAgent(t *testing.T) {
	l := &Lab{cfg: Config{Dir: t.TempDir(), Log: io.Discard}}
	if err := l.installAgent(); err != nil { // not built: skipped, no error
		t.Fatal(err)
	}
	dst := filepath.Join(l.RootFS(), AgentPath)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("installed without a binary: %v", err)
	}
	for _, body := range []string{"v1", "v2"} {
		if err := os.MkdirAll(l.BinDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(l.BinDir(), "onepool-node-agent"), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := l.installAgent(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		st, _ := os.Stat(dst)
		if err != nil || string(got) != body || st.Mode().Perm() != 0o755 {
			t.Errorf("installed %q mode %v (%v), want %q 0755", got, st.Mode(), err, body)
		}
	}
}
