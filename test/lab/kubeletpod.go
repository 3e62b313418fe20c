package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
	corev1 "k8s.io/api/core/v1"
)

// podCommand turns a slurmd pod into the command the lab kubelet runs in the
// chroot: the container named slurmd (else the first), its command and args
// as Kubernetes joins them, its env, and the lab's own env last so it wins.
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
	port, ok := DynSlurmdPort(node)
	if !ok {
		return nil, fmt.Errorf("node %s is no dynamic lab node (%s0 ... %s%d): no slurmd port for it", node, DynNodePrefix, DynNodePrefix, maxDynNodes-1)
	}
	root := k.l.RootFS()
	stateDir := "/run/onepool/" + node
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
	env = append(env,
		"ONEPOOL_SLURMD_PORT="+strconv.Itoa(port),
		"ONEPOOL_GPU_INVENTORY="+FakeGPUInventory,
		"ONEPOOL_CONF_DIR="+stateDir+"/slurm",
		"ONEPOOL_STATE_DIR="+stateDir,
		// The DRA driver (on when the pod sets ONEPOOL_DRA=true): no
		// kubelet calls it here, so it does not register; tests call its
		// socket in the chroot at <stateDir>/dra/dra.sock.
		"KUBECONFIG="+ChrootKubeconfig,
		"ONEPOOL_DRA_PLUGIN_DIR="+stateDir+"/dra",
		"ONEPOOL_DRA_REGISTRAR_DIR=",
		"ONEPOOL_CDI_DIR="+stateDir+"/cdi",
		podMarkerEnv+"="+string(pod.UID))
	argv := append(append([]string{}, c.Command...), c.Args...)
	return func() (*exec.Cmd, error) {
		prog, err := rootfs.LookPath(root, c.Command[0])
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(root, stateDir, "slurm"), 0o755); err != nil {
			return nil, err
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

// killPodProcs ends processes a lab kubelet started and did not stop (it was
// killed): they carry podMarkerEnv in their environment.
func killPodProcs(root string) error {
	marker := []byte(podMarkerEnv + "=")
	return proc.KillChrootedIf(root, func(pid int) bool {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		return err == nil && (bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...)))
	})
}
