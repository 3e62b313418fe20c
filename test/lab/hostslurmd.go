package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/rootfs"
)

// A slurmd as an existing Slurm cluster runs it on a host (systemd there;
// a process in the lab's Slurm chroot here), for a Kubernetes Node whose
// slurmd is not a pod: the lab's cluster with the real node as one of its
// hosts. It is a dynamic node (slurmd -Z, in the lab's dynamic partition
// by its feature) with a configuration directory of its own: the lab's
// slurm.conf beside the host's own gres.conf, which numbers its GPUs.

// HostSlurmdPort is the host slurmd's port (above the dynamic nodes').
const HostSlurmdPort = DynSlurmdPort0 + maxDynNodes + 8

// HostSlurmd is one running host slurmd.
type HostSlurmd struct {
	Node string
	// ConfDir is its configuration directory in the chroot, HostConfDir the
	// same directory as this machine (the real node) sees it; MungeDir is
	// the munge socket's directory as this machine sees it.
	ConfDir, HostConfDir, MungeDir string
	daemon                         daemon
}

// StartHostSlurmd starts the slurmd of Slurm node node, registering
// Gres=nodeGres (e.g. gpu:bbb:2,gpu:aaa:2), with gresConf as its
// gres.conf, and waits until slurmctld has it; StopHostSlurmd undoes it.
func (l *Lab) StartHostSlurmd(ctx context.Context, node, nodeGres, gresConf string) (*HostSlurmd, error) {
	h := &HostSlurmd{Node: node, ConfDir: "/etc/slurm-host-" + node}
	h.HostConfDir = filepath.Join(l.RootFS(), h.ConfDir)
	h.MungeDir = filepath.Join(l.RootFS(), "run/munge")
	if err := os.MkdirAll(h.HostConfDir, 0o755); err != nil {
		return nil, err
	}
	// The lab's *.conf (slurm.conf's hash must be the controller's);
	// the host's own gres.conf.
	confs, err := filepath.Glob(filepath.Join(l.RootFS(), "etc/slurm/*.conf"))
	if err != nil {
		return nil, err
	}
	for _, c := range confs {
		if filepath.Base(c) == "gres.conf" {
			continue
		}
		if err := copyFile(c, filepath.Join(h.HostConfDir, filepath.Base(c)), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(h.HostConfDir, "gres.conf"), []byte(gresConf), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(l.RootFS(), "var/spool/slurmd", node), 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("NodeAddr=127.0.0.1 Port=%d CPUs=8 RealMemory=16000 Gres=%s Feature=%s", HostSlurmdPort, nodeGres, DynFeature)
	h.daemon = daemon{Name: "slurmd-host-" + node, Chroot: l.RootFS(), Port: HostSlurmdPort, Env: rootfs.Env(),
		Argv: []string{"/usr/sbin/slurmd", "-D", "-Z", "-N", node, "-f", h.ConfDir + "/slurm.conf", "--conf", conf}}
	if _, err := l.procs.Start(h.daemon); err != nil {
		return nil, err
	}
	registered := func(ctx context.Context) error {
		out, err := l.Slurm(ctx, "sinfo", "-h", "-N", "-n", node, "-o", "%T")
		st := strings.TrimSpace(string(out))
		if err != nil || st == "" || strings.Contains(st, "not_responding") || strings.HasSuffix(st, "*") || strings.Contains(st, "future") {
			return fmt.Errorf("slurm node %s: %q %v", node, st, err)
		}
		return nil
	}
	if err := l.procs.Await(ctx, h.daemon, time.Minute, filepath.Join(l.RootFS(), "var/log/onepool/slurmd-"+node+".log"), registered); err != nil {
		return nil, errors.Join(err, l.StopHostSlurmd(context.Background(), h))
	}
	return h, nil
}

// StopHostSlurmd stops the host slurmd, deletes its dynamic node from
// Slurm and removes its configuration directory.
func (l *Lab) StopHostSlurmd(ctx context.Context, h *HostSlurmd) error {
	err := l.procs.Stop(h.daemon.Name)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if known, _ := l.Slurm(ctx, "sinfo", "-h", "-N", "-n", h.Node, "-o", "%N"); strings.TrimSpace(string(known)) != "" {
		if out, derr := l.Slurm(ctx, "scontrol", "delete", "nodename="+h.Node); derr != nil {
			err = errors.Join(err, fmt.Errorf("scontrol delete nodename=%s: %w (%s)", h.Node, derr, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(err, os.RemoveAll(h.HostConfDir))
}
