package realnode

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

// Exists says whether the node ever ran here (its dir exists).
func (n *Node) Exists() bool {
	_, err := os.Stat(n.Dir)
	return err == nil
}

// KubeletRunning says whether the node's kubelet runs.
func (n *Node) KubeletRunning() bool { return n.Procs.Running(n.kubeletDaemon("")) != 0 }

// Teardown removes what the node leaves once its kubelet has stopped: it
// marks the Node's Ready Unknown, kills and deletes the containerd tasks
// left, stops containerd, kills leftover shims and pod processes, unmounts
// everything under Dir and removes the node's cgroups, log links, bridge
// and IPAM state.
func (n *Node) Teardown(ctx context.Context) error {
	n.markUnknown(ctx)
	if n.Procs.Running(n.containerdDaemon()) != 0 {
		n.stopTasks(ctx)
	}
	var errs []error
	errs = append(errs, n.Procs.Stop(containerdName))
	errs = append(errs, n.killLeftovers())
	n.removeShimSockets()
	errs = append(errs, mount.UnmountUnder(n.Dir))
	errs = append(errs, n.removeCgroup())
	errs = append(errs, n.removeContainerLogLinks())
	errs = append(errs, n.removeBridge())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Every sandbox is gone: no address the IPAM store holds is in use.
	return os.RemoveAll(n.path("cni", "ipam"))
}

// StopKubelet stops the node's kubelet.
func (n *Node) StopKubelet() error { return n.Procs.Stop(kubeletName) }

// DeletePods deletes every pod bound to the node (grace 5 s) and waits,
// at most 60 s, until the kubelet has stopped them and they are gone.
func (n *Node) DeletePods(ctx context.Context) error {
	cs, err := n.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", Name).String()}
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
			return fmt.Errorf("%d pods still on %s: %w", len(pods.Items), Name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stopTasks kills and deletes the containerd tasks (pod sandboxes and
// containers) that outlived the kubelet, static pods among them. It never
// fails Teardown: a task whose delete does not go through (its shim already
// gone, containerd slow: "context deadline exceeded" in CI, 2026-11-26) is
// logged, and what it leaves is killed and unmounted by the steps after,
// which do report what stays.
func (n *Node) stopTasks(ctx context.Context) {
	lsCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	out, err := n.Ctr(lsCtx, "tasks", "ls", "-q")
	cancel()
	if err != nil {
		fmt.Fprintf(n.Log, "lab: node tasks not listed (the processes left are killed next): %v\n", err)
		return
	}
	for _, id := range strings.Fields(string(out)) {
		// Each task has its own bound, so one slow task does not use up
		// the others' time.
		tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, _ = n.Ctr(tctx, "tasks", "kill", "--signal", "SIGKILL", id)
		var last error
		for tctx.Err() == nil {
			if _, last = n.Ctr(tctx, "tasks", "delete", id); last == nil {
				break
			}
			select {
			case <-tctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		cancel()
		if last != nil {
			fmt.Fprintf(n.Log, "lab: node task %s not deleted (its processes are killed next): %v\n", id, last)
		}
	}
}

// killLeftovers kills what the daemons left: shims of this lab's
// containerd (their command line names its socket) and every process in
// the node's cgroup (pause and container processes).
func (n *Node) killLeftovers() error {
	pids := n.leftoverPids()
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 100; i++ { // 10 s
		if len(n.leftoverPids()) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node processes survive SIGKILL: %v", n.leftoverPids())
}

func (n *Node) leftoverPids() []int {
	set := map[int]bool{}
	sock := n.ContainerdSocket()
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
		_ = filepath.WalkDir(filepath.Join(m, n.Cgroup()), func(path string, d os.DirEntry, err error) error {
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

// removeCgroup removes the node's cgroup tree in every hierarchy,
// deepest first (a cgroup dir goes with rmdir once it has no processes).
func (n *Node) removeCgroup() error {
	ms, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		root := filepath.Join(m, n.Cgroup())
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
func (n *Node) removeContainerLogLinks() error {
	const dir = "/var/log/containers"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := n.Dir + "/"
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

// removeBridge deletes the pods' bridge the CNI plugin made (it would
// stay on the host otherwise).
func (n *Node) removeBridge() error {
	if _, err := net.InterfaceByName(n.Bridge()); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "link", "delete", n.Bridge()).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %v: %s", n.Bridge(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// markUnknown sets the Node's Ready condition to Unknown, as the node
// lifecycle controller would (none runs in the lab: a stopped kubelet's Node
// would stay Ready). Best effort: the apiserver may be gone already.
func (n *Node) markUnknown(ctx context.Context) {
	cs, err := n.Client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"the lab stopped the kubelet","lastTransitionTime":%q}]}}`, now)
	_, err = cs.CoreV1().Nodes().Patch(ctx, Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(n.Log, "lab: node %s not marked NotReady: %v\n", Name, err)
	}
}

// removeShimSockets removes the sockets of this lab's shims that died
// without cleaning up: containerd 1.6 puts them at /run/containerd/s/HASH
// (not under its state dir) and writes each task's one into an "address"
// file of the task's state folder.
func (n *Node) removeShimSockets() {
	addrs, _ := filepath.Glob(n.path("containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
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
