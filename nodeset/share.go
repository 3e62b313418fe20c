package nodeset

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/onepool/onepool/keys"
)

// One count of CPUs and memory. What Slurm may give out on a Node is what
// the kubelet has allocatable there less what the Node's pods that onepool
// did not place request: DaemonSets, system pods, pods of other schedulers,
// and slurmd's own pod (its request is for slurmd, not for jobs). Pods
// onepool placed are left out: their CPUs and memory are their Slurm jobs'.
// The NodeSet counts it when it makes a slurmd pod; the node registers with
// it (CPUs=, RealMemory=). Slurm cannot change a dynamic node's CPUs while
// jobs run, so a later change is told (EventShareOvercommitted), not acted on.

// share is Slurm's part of one Node.
type share struct {
	CPUs     int64 // whole CPUs
	MemoryMB int64 // MiB (Slurm's MB)
}

func (s share) String() string { return fmt.Sprintf("cpus=%d,memory-mb=%d", s.CPUs, s.MemoryMB) }

// covers says whether s gives Slurm at least what o does.
func (s share) covers(o share) bool { return s.CPUs >= o.CPUs && s.MemoryMB >= o.MemoryMB }

// parseShare reads AnnotationSlurmShare.
func parseShare(v string) (share, error) {
	var s share
	var cpus, mem bool
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 1 {
			return share{}, fmt.Errorf("%s %q: %s is not a positive number", keys.AnnotationSlurmShare, v, k)
		}
		switch k {
		case "cpus":
			s.CPUs, cpus = n, true
		case "memory-mb":
			s.MemoryMB, mem = n, true
		default:
			return share{}, fmt.Errorf("%s %q: unknown key %q", keys.AnnotationSlurmShare, v, k)
		}
	}
	if !cpus || !mem {
		return share{}, fmt.Errorf("%s %q: want cpus=<n>,memory-mb=<n>", keys.AnnotationSlurmShare, v)
	}
	return s, nil
}

// errNoAllocatable: the Node reports no allocatable CPU or memory (no
// kubelet has written its status yet): nothing can be counted, and the
// node agent counts the machine as before.
var errNoAllocatable = errors.New("the Node reports no allocatable CPU or memory")

// NoRoomError says the Node's other pods leave Slurm less than one CPU or one
// MiB.
type NoRoomError struct {
	Node                         string
	Allocatable, Requested       resource.Quantity // CPU
	MemAllocatable, MemRequested resource.Quantity
}

func (e *NoRoomError) Error() string {
	return fmt.Sprintf("Node %s: pods onepool did not place (slurmd's own among them) request %s of %s allocatable CPUs and %s of %s memory: nothing is left for Slurm",
		e.Node, e.Requested.String(), e.Allocatable.String(), e.MemRequested.String(), e.MemAllocatable.String())
}

// slurmShare counts Slurm's part of node. pods are the pods bound to it;
// slurmd is the slurmd pod to be made there (the NodeSet's earlier slurmd
// pod on the node, which it replaces, is left out of pods).
func slurmShare(node *corev1.Node, pods []corev1.Pod, slurmd *corev1.Pod) (share, error) {
	cpuAlloc, okCPU := node.Status.Allocatable[corev1.ResourceCPU]
	memAlloc, okMem := node.Status.Allocatable[corev1.ResourceMemory]
	if !okCPU || !okMem || cpuAlloc.IsZero() || memAlloc.IsZero() {
		return share{}, errNoAllocatable
	}
	cpuReq, memReq := resource.Quantity{Format: resource.DecimalSI}, resource.Quantity{Format: resource.BinarySI}
	add := func(p *corev1.Pod) {
		r := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		cpuReq.Add(r[corev1.ResourceCPU])
		memReq.Add(r[corev1.ResourceMemory])
	}
	for i := range pods {
		p := &pods[i]
		if !countsAgainstSlurm(p, node.Name, slurmd) {
			continue
		}
		add(p)
	}
	if slurmd != nil {
		add(slurmd)
	}
	s := share{
		CPUs:     (cpuAlloc.MilliValue() - cpuReq.MilliValue()) / 1000,
		MemoryMB: (memAlloc.Value() - memReq.Value()) >> 20,
	}
	if s.CPUs < 1 || s.MemoryMB < 1 {
		return share{}, &NoRoomError{Node: node.Name, Allocatable: cpuAlloc, Requested: cpuReq, MemAllocatable: memAlloc, MemRequested: memReq}
	}
	return s, nil
}

// countsAgainstSlurm: a pod on the node that holds its requests there and
// is neither onepool's (placed through Slurm) nor a slurmd pod of the same
// NodeSet on the node (the one being made, or the one it replaces).
func countsAgainstSlurm(p *corev1.Pod, node string, slurmd *corev1.Pod) bool {
	switch {
	case p.Spec.NodeName != node,
		p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		p.Spec.SchedulerName == keys.SchedulerName:
		return false
	case slurmd != nil && p.Labels[keys.LabelComponent] == keys.ComponentSlurmd &&
		p.Labels[keys.LabelNodeSet] == slurmd.Labels[keys.LabelNodeSet] && p.Namespace == slurmd.Namespace:
		return false
	}
	return true
}

// withShare gives the pod's slurmd container Slurm's share and records it
// on the pod.
func withShare(pod *corev1.Pod, s share) {
	i := slurmdIndex(pod.Spec.Containers)
	if i < 0 {
		return
	}
	c := &pod.Spec.Containers[i]
	c.Env = setEnv(c.Env, corev1.EnvVar{Name: keys.EnvSlurmCPUs, Value: strconv.FormatInt(s.CPUs, 10)})
	c.Env = setEnv(c.Env, corev1.EnvVar{Name: keys.EnvSlurmRealMemoryMB, Value: strconv.FormatInt(s.MemoryMB, 10)})
	pod.Annotations = merge(pod.Annotations, map[string]string{keys.AnnotationSlurmShare: s.String()})
}

// staticCount says whether the template's slurmd container sets the
// node's count itself (or there is no slurmd container to count for).
func staticCount(tmpl *corev1.Pod) bool {
	i := slurmdIndex(tmpl.Spec.Containers)
	if i < 0 {
		return true
	}
	env := tmpl.Spec.Containers[i].Env
	return hasEnv(env, keys.EnvSlurmCPUs) || hasEnv(env, keys.EnvSlurmRealMemoryMB)
}

// slurmdIndex is slurmd's container: the one named so, else the first
// unless that is the DRA driver's (agentContainers' choice); -1 for none.
func slurmdIndex(cs []corev1.Container) int {
	for i, c := range cs {
		if c.Name == slurmdContainer {
			return i
		}
	}
	if len(cs) > 0 && cs[0].Name != draContainer {
		return 0
	}
	return -1
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}
