package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/test/lab/mount"
)

// StopNode stops the real node: its pods first (through the apiserver,
// while the kubelet still runs), then the kubelet, the containers left,
// containerd, leftover shims and pod processes; then it unmounts everything
// under .lab/node and removes the node's cgroups. It does nothing when the
// node never ran, and it never stops the control plane. Down calls it first.
func (l *Lab) StopNode(ctx context.Context) error {
	if _, err := os.Stat(l.nodePath()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	if l.procs.Running(l.realKubeletDaemon("")) != 0 {
		if err := l.deleteNodePods(ctx); err != nil {
			// Not fatal: what is left is killed below.
			fmt.Fprintf(l.cfg.Log, "lab: node pods not deleted through the apiserver: %v\n", err)
		}
	}
	errs = append(errs, l.stopRealKubelet(), l.procs.Stop("kube-scheduler"), l.stopClusterNet(ctx))
	l.markNodeUnknown(ctx)
	if l.procs.Running(l.containerdDaemon()) != 0 {
		l.stopNodeTasks(ctx)
	}
	errs = append(errs, l.procs.Stop(containerdDaemon))
	errs = append(errs, l.killNodeLeftovers())
	l.removeShimSockets()
	errs = append(errs, mount.UnmountUnder(l.nodePath()))
	errs = append(errs, l.removeNodeCgroup())
	errs = append(errs, l.removeContainerLogLinks())
	errs = append(errs, l.removeNodeBridge())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Every sandbox is gone: no address the IPAM store holds is in use.
	return os.RemoveAll(l.nodePath("cni", "ipam"))
}

func (l *Lab) stopRealKubelet() error { return l.procs.Stop(realKubeletDaemon) }

// deleteNodePods deletes every pod bound to the node (grace 5 s) and waits,
// at most 60 s, until the kubelet has stopped them and they are gone.
func (l *Lab) deleteNodePods(ctx context.Context) error {
	cs, err := l.KubeClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", RealNodeName).String()}
	grace := int64(5)
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d pods still on %s: %w", len(pods.Items), RealNodeName, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stopNodeTasks kills and deletes the containerd tasks (pod sandboxes and
// containers) that outlived the kubelet, static pods among them. It never
// fails StopNode: a task whose delete does not go through (its shim already
// gone, containerd slow: "context deadline exceeded" in CI, 2026-11-26) is
// logged, and what it leaves is killed and unmounted by the steps after,
// which do report what stays.
func (l *Lab) stopNodeTasks(ctx context.Context) {
	lsCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	out, err := l.ctr(lsCtx, "tasks", "ls", "-q")
	cancel()
	if err != nil {
		fmt.Fprintf(l.cfg.Log, "lab: node tasks not listed (the processes left are killed next): %v\n", err)
		return
	}
	for _, id := range strings.Fields(string(out)) {
		// Each task has its own bound, so one slow task does not use up
		// the others' time.
		tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, _ = l.ctr(tctx, "tasks", "kill", "--signal", "SIGKILL", id)
		var last error
		for tctx.Err() == nil {
			if _, last = l.ctr(tctx, "tasks", "delete", id); last == nil {
				break
			}
			select {
			case <-tctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		cancel()
		if last != nil {
			fmt.Fprintf(l.cfg.Log, "lab: node task %s not deleted (its processes are killed next): %v\n", id, last)
		}
	}
}

// killNodeLeftovers kills what the daemons left: shims of this lab's
// containerd (their command line names its socket) and every process in
// the node's cgroup (pause and container processes).
func (l *Lab) killNodeLeftovers() error {
	pids := l.nodeLeftoverPids()
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 100; i++ { // 10 s
		if len(l.nodeLeftoverPids()) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node processes survive SIGKILL: %v", l.nodeLeftoverPids())
}

func (l *Lab) nodeLeftoverPids() []int {
	set := map[int]bool{}
	sock := l.ContainerdSocket()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, sock) && !zombie(pid) {
			set[pid] = true
		}
	}
	ms, _ := cgroupMounts()
	for _, m := range ms {
		_ = filepath.WalkDir(filepath.Join(m, l.nodeCgroup()), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !zombie(pid) {
					set[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(set))
	for pid := range set {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// removeNodeCgroup removes the node's cgroup tree in every hierarchy,
// deepest first (a cgroup dir goes with rmdir once it has no processes).
func (l *Lab) removeNodeCgroup() error {
	ms, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		root := filepath.Join(m, l.nodeCgroup())
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 20; i++ { // a killed process leaves its cgroup a moment later
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeContainerLogLinks removes the kubelet's links in /var/log/containers
// (a path built into the kubelet) that point into this lab.
func (l *Lab) removeContainerLogLinks() error {
	const dir = "/var/log/containers"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := l.nodePath() + "/"
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, prefix) {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeNodeBridge deletes the pods' bridge the CNI plugin made (it would
// stay on the host otherwise).
func (l *Lab) removeNodeBridge() error {
	if _, err := net.InterfaceByName(l.nodeBridge()); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", l.nodeBridge()).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %v: %s", l.nodeBridge(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// markNodeUnknown sets the Node's Ready condition to Unknown, as the node
// lifecycle controller would (none runs in the lab: a stopped kubelet's Node
// would stay Ready). Best effort: the apiserver may be gone already.
func (l *Lab) markNodeUnknown(ctx context.Context) {
	cs, err := l.KubeClient()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"the lab stopped the kubelet","lastTransitionTime":%q}]}}`, now)
	_, err = cs.CoreV1().Nodes().Patch(ctx, RealNodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(l.cfg.Log, "lab: node %s not marked NotReady: %v\n", RealNodeName, err)
	}
}

// removeShimSockets removes the sockets of this lab's shims that died
// without cleaning up: containerd 1.6 puts them at /run/containerd/s/HASH
// (not under its state dir) and writes each task's one into an "address"
// file of the task's state folder.
func (l *Lab) removeShimSockets() {
	addrs, _ := filepath.Glob(l.nodePath("containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	for _, a := range addrs {
		b, err := os.ReadFile(a)
		if err != nil {
			continue
		}
		sock := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
		if filepath.Dir(sock) == "/run/containerd/s" {
			_ = os.Remove(sock)
		}
	}
}
