package podkubelet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodCommand(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/local/bin/onepool-node-agent"), []byte("#!/bin/sh\n"), 0o755))
	k := &kubelet{cfg: Config{Root: root, Node: func(node string) (Node, error) {
		if node != "dyn-3" {
			return Node{}, errors.New("no slurmd port for " + node)
		}
		return Node{Env: []string{"ONEPOOL_SLURMD_PORT=26953", "ONEPOOL_STATE_DIR=/run/onepool/dyn-3"}, Dirs: []string{"/run/onepool/dyn-3/slurm"}}, nil
	}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-dyn-3", Namespace: "ns", UID: "u-1"},
		Spec: corev1.PodSpec{NodeName: "dyn-3", Containers: []corev1.Container{
			{Name: "sidecar", Command: []string{"/bin/false"}},
			{Name: "slurmd", Command: []string{"onepool-node-agent"}, Args: []string{"run"}, Env: []corev1.EnvVar{
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
	require.NoError(t, err)
	cmd, err := mk()
	require.NoError(t, err)
	assert.Equal(t, "/usr/local/bin/onepool-node-agent", cmd.Path, "the program is looked up in the chroot, not on the host")
	assert.Equal(t, []string{"onepool-node-agent", "run"}, cmd.Args)
	assert.Equal(t, root, cmd.SysProcAttr.Chroot)
	assert.True(t, cmd.SysProcAttr.Setpgid, "its own process group")
	assert.Equal(t, "/", cmd.Dir)
	assert.DirExists(t, filepath.Join(root, "run/onepool/dyn-3/slurm"), "the lab's directories are made before the start")
	env := strings.Join(cmd.Env, "\n") + "\n"
	for _, want := range []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin\n", "ONEPOOL_SLURM_FEATURES=lab-dyn\n", "ONEPOOL_SLURM_NODE_NAME=dyn-3\n",
		"POD=slurmd-dyn-3\n", "ONEPOOL_STATE_DIR=/run/onepool/dyn-3\n", "ONEPOOL_LAB_KUBELET_POD=u-1\n"} {
		assert.Contains(t, env, want)
	}
	// exec keeps the last of duplicate keys: the lab's port must come last.
	i, j := strings.Index(env, "ONEPOOL_SLURMD_PORT=1\n"), strings.Index(env, "ONEPOOL_SLURMD_PORT=26953\n")
	assert.True(t, j >= 0 && j > i, "the lab's port does not override the pod's:\n%s", env)
	assert.NotContains(t, env, "IP=", "status.podIP is not served")
	assert.Len(t, logged, 1, "one line for the env left out")

	pod.Spec.Containers[1].Command = nil
	_, err = k.podCommand(pod, t.Logf)
	assert.ErrorContains(t, err, "no command")
	pod.Spec.Containers[1].Command, pod.Spec.NodeName = []string{"/usr/sbin/slurmd"}, "gpu-0"
	_, err = k.podCommand(pod, t.Logf)
	assert.ErrorContains(t, err, "no slurmd port", "a pod on a node the lab runs no slurmd for")
	pod.Spec.Containers[1].Command, pod.Spec.NodeName = []string{"no-such-program"}, "dyn-3"
	mk, err = k.podCommand(pod, t.Logf)
	require.NoError(t, err)
	_, err = mk()
	assert.Error(t, err, "a program missing from the chroot fails at start, to be tried again")
}
