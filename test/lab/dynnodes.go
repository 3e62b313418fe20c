package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/onepool/onepool/test/lab/podkubelet"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// Dynamic nodes: kwok Nodes that slurm.conf does not list. A slurmd pod on
// one (the NodeSet controller's) is run by the lab kubelet in the chroot, and
// its slurmd -Z registers the node; the feature puts it in DynPartition.
const (
	DynNodePrefix = "dyn-"
	DynPartition  = slurmconf.DynPartition
	DynFeature    = slurmconf.DynFeature

	// FakeGPUInventory is the node agent's GPU list inside the chroot: the
	// lab's stand-in for NVML, naming the fake devices of every node.
	FakeGPUInventory = "/etc/onepool/fake-gpus.json"
	FakeGPUName      = "NVIDIA H100 80GB HBM3"
	fakeGPUMemoryMiB = 81559

	// AgentPath is where `lab up` installs .lab/bin/onepool-node-agent in the chroot.
	AgentPath = "/usr/local/bin/onepool-node-agent"
	// ChrootKubeconfig is the lab's kubeconfig inside the chroot, for the
	// node agent's DRA driver in slurmd pods of the process kubelet.
	ChrootKubeconfig = "/etc/onepool/kubeconfig"
)

// DynNodeNames are the dynamic nodes: dyn-0 ... dyn-(DynNodes-1).
func (l *Lab) DynNodeNames() []string {
	names := make([]string, l.cfg.DynNodes)
	for i := range names {
		names[i] = DynNodePrefix + strconv.Itoa(i)
	}
	return names
}

// DynSlurmdPort is the slurmd port of dynamic node name (dyn-i: DynSlurmdPort0+i).
func DynSlurmdPort(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, DynNodePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= maxDynNodes || strconv.Itoa(i) != s {
		return 0, false
	}
	return DynSlurmdPort0 + i, true
}

type fakeGPU struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	Minor     int    `json:"minor"`
	MemoryMiB int    `json:"memoryMiB"`
	Device    string `json:"device"`
}

// fakeGPUInventory is the JSON the node agent reads instead of asking NVML.
func fakeGPUInventory() string {
	var inv struct {
		GPUs []fakeGPU `json:"gpus"`
	}
	for i := 0; i < GPUsPerNode; i++ {
		inv.GPUs = append(inv.GPUs, fakeGPU{Index: i, Name: FakeGPUName, UUID: fmt.Sprintf("GPU-lab-%d", i), Minor: i,
			MemoryMiB: fakeGPUMemoryMiB, Device: fmt.Sprintf("/var/lib/fakegpu/nvidia%d", i)})
	}
	b, _ := json.MarshalIndent(inv, "", "  ") // plain structs: cannot fail
	return string(b) + "\n"
}

// NodeGPUInventory is the real node's fake GPUs (NodeFakeGPUs of them) as
// the node agent's inventory: minor N at NodeFakeGPUDir/nvidiaN.
func NodeGPUInventory() string {
	var inv struct {
		GPUs []fakeGPU `json:"gpus"`
	}
	for i := range NodeFakeGPUs {
		inv.GPUs = append(inv.GPUs, fakeGPU{Index: i, Name: FakeGPUName, UUID: fmt.Sprintf("GPU-node-%d", i), Minor: i,
			MemoryMiB: fakeGPUMemoryMiB, Device: fmt.Sprintf("%s/nvidia%d", NodeFakeGPUDir, i)})
	}
	b, _ := json.Marshal(inv) // plain structs: cannot fail
	return string(b) + "\n"
}

// prepareDynNodes readies the chroot for slurmd pods: the fake GPU list, the
// node agent, and no Slurm records left from an earlier run.
func (l *Lab) prepareDynNodes(ctx context.Context) error {
	if _, err := rootfs.WriteIfChanged(filepath.Join(l.RootFS(), FakeGPUInventory), fakeGPUInventory()); err != nil {
		return err
	}
	if err := l.installAgent(); err != nil {
		return err
	}
	// A running kubelet owns the dynamic nodes that are registered now.
	if l.procs.Running(l.kubeletDaemon()) != 0 {
		return nil
	}
	// A kubelet killed hard leaves its slurmd running; they would register again.
	if err := podkubelet.KillLeftovers(l.RootFS()); err != nil {
		return err
	}
	return l.deleteDynRecords(ctx)
}

// installChrootKubeconfig puts the lab's kubeconfig in the chroot for the
// node agents the process kubelet runs (their DRA driver).
func (l *Lab) installChrootKubeconfig(context.Context) error {
	kc, err := os.ReadFile(l.Kubeconfig())
	if err != nil {
		return err
	}
	dst := filepath.Join(l.RootFS(), ChrootKubeconfig)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, kc, 0o600)
}

// installAgent copies the node agent into the chroot when it was built and
// differs, through a rename so a running agent's file is never rewritten.
func (l *Lab) installAgent() error {
	src := filepath.Join(l.BinDir(), "onepool-node-agent")
	body, err := os.ReadFile(src)
	if os.IsNotExist(err) {
		fmt.Fprintf(l.cfg.Log, "lab:   %s is not built; slurmd pods cannot run the node agent\n", src)
		return nil
	}
	if err != nil {
		return err
	}
	dst := filepath.Join(l.RootFS(), AgentPath)
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, body) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := copyFile(src, dst, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(l.cfg.Log, "lab:   installed %s in the chroot at %s\n", src, AgentPath)
	return nil
}

// deleteDynRecords removes every dyn-* node record from Slurm. A record that
// Slurm keeps (a job still runs there) is reported and left: it goes DOWN
// without its slurmd and does not stop the lab.
func (l *Lab) deleteDynRecords(ctx context.Context) error {
	_, err := l.deleteDynRecordsBut(ctx, func(string) bool { return false })
	return err
}

// deleteDynRecordsBut removes the dyn-* node records of Slurm that keep
// does not keep, and returns the names it removed.
func (l *Lab) deleteDynRecordsBut(ctx context.Context, keep func(name string) bool) ([]string, error) {
	// One line per node: "NodeName=dyn-0 ..." or "Node dyn-1 not found"
	// (then it exits 1).
	out, err := l.Slurm(ctx, "scontrol", "show", "nodes", "-o", fmt.Sprintf("%s[0-%d]", DynNodePrefix, maxDynNodes-1))
	if err != nil && !strings.Contains(string(out), " not found") {
		return nil, err
	}
	var deleted []string
	for _, line := range strings.Split(string(out), "\n") {
		name, ok := strings.CutPrefix(strings.Fields(line + " x")[0], "NodeName=")
		if !ok || keep(name) {
			continue
		}
		// A name Slurm does not know: "Invalid node name specified".
		if _, err := l.Slurm(ctx, "scontrol", "delete", "nodename="+name); err != nil && !strings.Contains(err.Error(), "Invalid node name") {
			fmt.Fprintf(l.cfg.Log, "lab:   stale dynamic node %s stays: %v\n", name, err)
		} else {
			deleted = append(deleted, name)
			fmt.Fprintf(l.cfg.Log, "lab:   deleted stale dynamic node %s\n", name)
		}
	}
	return deleted, nil
}

// GresUsedCount reads a node's gres_used ("gpu:h100:3(IDX:0-2)") as the
// number of GPUs allocated there (0 for "gpu:h100:0(IDX:N/A)" or "").
func GresUsedCount(used string) int {
	s, _, _ := strings.Cut(used, "(")
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return 0
	}
	return n
}
