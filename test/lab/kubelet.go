package lab

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/kwoknodes"
	"github.com/onepool/onepool/test/lab/podkubelet"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab kubelet (package podkubelet) runs the slurmd pods of the Nodes
// that carry KubeletAnnotation=KubeletChroot: kwok marks those pods Running,
// and the lab kubelet starts their slurmd container's command inside the
// Slurm chroot, so a NodeSet's pods bring real slurmd (or the node agent) up
// and down.
const (
	KubeletAnnotation = kwoknodes.Kubelet
	KubeletChroot     = kwoknodes.KubeletChroot
	kubeletName       = "lab-kubelet"
)

func (l *Lab) kubeletDaemon() daemon {
	return daemon{
		Name: kubeletName,
		Argv: []string{filepath.Join(l.BinDir(), "lab"), "kubelet"},
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run"), "ONEPOOL_LAB_DIR=" + l.cfg.Dir, rootfs.EnvSlurm + "=" + l.Release().Name},
	}
}

func (l *Lab) kubeletReadyFile() string { return l.path("run", kubeletName+".ready") }

// KubeletLog is where the lab kubelet appends the output of node's slurmd pods.
func (l *Lab) KubeletLog(node string) string {
	return filepath.Join(l.LogDir(), "kubelet-"+node+".log")
}

// StartKubelet starts the lab kubelet (again when the lab binary was rebuilt
// since) and waits until it watches pods.
func (l *Lab) StartKubelet(ctx context.Context) error {
	d := l.kubeletDaemon()
	if err := l.startOwn(d, false, l.StopKubelet); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 60*time.Second, l.procs.OutFile(kubeletName), func(context.Context) error {
		pid := l.procs.Running(d)
		if pid == 0 {
			return errors.New("not running")
		}
		if b, _ := os.ReadFile(l.kubeletReadyFile()); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
			return errors.New("informers not synced yet")
		}
		return nil
	})
}

// StopKubelet stops the lab kubelet, which stops its pods' processes first
// (20 s each, in parallel): it gets longer than other daemons.
func (l *Lab) StopKubelet() error {
	if pid, prog := l.procs.ReadPid(kubeletName); pid != 0 && proc.Alive(pid, prog) {
		if err := proc.Terminate(pid, prog, 40*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", kubeletName, err)
		}
	}
	if err := os.Remove(l.procs.PidFile(kubeletName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// RunKubelet is `lab kubelet`: it runs until ctx ends, then stops every
// process it started.
func (l *Lab) RunKubelet(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	return podkubelet.Run(ctx, podkubelet.Config{
		Root:      l.RootFS(),
		Client:    kc,
		ReadyFile: l.kubeletReadyFile(),
		LogFile:   l.KubeletLog,
		Node:      kubeletNode,
		Log:       log.New(os.Stderr, "lab-kubelet: ", log.LstdFlags|log.Lmicroseconds),
	})
}

// kubeletNode is what the lab gives a slurmd pod on a dynamic node: its
// slurmd port, the fake GPUs' inventory, its own configuration and state
// directories, and the chroot's kubeconfig for the DRA driver.
func kubeletNode(node string) (podkubelet.Node, error) {
	port, ok := DynSlurmdPort(node)
	if !ok {
		return podkubelet.Node{}, fmt.Errorf("node %s is no dynamic lab node (%s0 ... %s%d): no slurmd port for it", node, DynNodePrefix, DynNodePrefix, maxDynNodes-1)
	}
	stateDir := "/run/onepool/" + node
	return podkubelet.Node{
		Env: []string{
			"ONEPOOL_SLURMD_PORT=" + strconv.Itoa(port),
			"ONEPOOL_GPU_INVENTORY=" + FakeGPUInventory,
			"ONEPOOL_CONF_DIR=" + stateDir + "/slurm",
			"ONEPOOL_STATE_DIR=" + stateDir,
			// The DRA driver (on when the pod sets ONEPOOL_DRA=true): no
			// kubelet calls it here, so it does not register; tests call its
			// socket in the chroot at <stateDir>/dra/dra.sock.
			"KUBECONFIG=" + ChrootKubeconfig,
			"ONEPOOL_DRA_PLUGIN_DIR=" + stateDir + "/dra",
			"ONEPOOL_DRA_REGISTRAR_DIR=",
			"ONEPOOL_CDI_DIR=" + stateDir + "/cdi",
			"ONEPOOL_DRIVER_ROOT=" + FakeDriverRoot,
		},
		Dirs: []string{stateDir + "/slurm"},
	}, nil
}
