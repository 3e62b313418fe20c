package podkubelet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
	corev1 "k8s.io/api/core/v1"
)

// podCommand turns a slurmd pod into the command the kubelet runs in the
// chroot: the container named slurmd (else the first), its command and args
// as Kubernetes joins them, its env, and the lab's (Config.Node) last so
// it wins.
// Its error is about the pod's spec; the maker's (an exec.Cmd runs only
// once) is about the chroot, which can change before the next try.
func (k *kubelet) podCommand(pod *corev1.Pod, logf func(string, ...any)) (func() (*exec.Cmd, error), error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, errors.New("pod has no containers")
	}
	c := pod.Spec.Containers[0]
	for _, cc := range pod.Spec.Containers {
		if cc.Name == slurmdName {
			c = cc
		}
	}
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("container %q has no command: the lab runs no images, so the pod must name its program", c.Name)
	}
	node := pod.Spec.NodeName
	setup, err := k.cfg.Node(node)
	if err != nil {
		return nil, err
	}
	root := k.cfg.Root
	env := []string{podEnvPath}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && fieldValue(pod, e.ValueFrom.FieldRef.FieldPath) != nil:
			env = append(env, e.Name+"="+*fieldValue(pod, e.ValueFrom.FieldRef.FieldPath))
		default:
			logf("env %s: only values and fieldRef to metadata.name, metadata.namespace, metadata.uid, spec.nodeName are supported; left out", e.Name)
		}
	}
	env = append(append(env, setup.Env...), podMarkerEnv+"="+string(pod.UID))
	argv := append(append([]string{}, c.Command...), c.Args...)
	return func() (*exec.Cmd, error) {
		prog, err := rootfs.LookPath(root, c.Command[0])
		if err != nil {
			return nil, err
		}
		for _, d := range setup.Dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return nil, err
			}
		}
		// exec.Command would look the program up on the host.
		return &exec.Cmd{Path: prog, Args: argv, Env: env, Dir: "/",
			SysProcAttr: &syscall.SysProcAttr{Chroot: root, Setpgid: true}}, nil
	}, nil
}

// fieldValue is the downward API for the fields a slurmd pod needs; nil for others.
func fieldValue(pod *corev1.Pod, path string) *string {
	var v string
	switch path {
	case "metadata.name":
		v = pod.Name
	case "metadata.namespace":
		v = pod.Namespace
	case "metadata.uid":
		v = string(pod.UID)
	case "spec.nodeName":
		v = pod.Spec.NodeName
	default:
		return nil
	}
	return &v
}

// KillLeftovers ends processes a kubelet started in root and did not stop
// (it was killed): they carry podMarkerEnv in their environment.
func KillLeftovers(root string) error {
	marker := []byte(podMarkerEnv + "=")
	return proc.KillChrootedIf(root, func(pid int) bool {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		return err == nil && (bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...)))
	})
}
