// Package kwoknodes is the lab's Kubernetes Nodes: kwok's fake Nodes, one
// per Slurm node of the lab (the static gpu-N, the Slurm-only scale nodes,
// the dynamic dyn-N), each offering the GPUs, CPUs and memory Slurm knows.
// kwok keeps them Ready and plays their kubelet; the lab kubelet runs the
// slurmd pods of the dynamic ones (Kubelet=KubeletChroot).
package kwoknodes

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab/slurmconf"
)

const (
	// Label marks the Nodes the lab made (Ensure removes those it no
	// longer wants).
	Label = "lab.onepool.dev/node"
	// Kubelet=KubeletChroot on a Node: kwok marks its pods Running, and the
	// lab kubelet starts their slurmd container's command inside the Slurm
	// chroot, so a NodeSet's pods bring real slurmd up and down.
	Kubelet       = "lab.onepool.dev/kubelet"
	KubeletChroot = "chroot"
)

// Node is the Node object of a lab GPU node: kwok keeps it Ready, and it
// offers the same GPUs Slurm knows.
func Node(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(slurmconf.NodeCPUs, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(slurmconf.NodeMemoryMB*1024*1024, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		"nvidia.com/gpu":      *resource.NewQuantity(slurmconf.GPUsPerNode, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				Label: "true",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// DynNode is the Node of a dynamic lab node: a kwok Node whose slurmd pods
// the lab kubelet runs in the Slurm chroot.
func DynNode(name string) *corev1.Node {
	n := Node(name)
	n.Annotations[Kubelet] = KubeletChroot
	return n
}

// Ensure makes the Node build(name) for each name that has none, and
// removes the lab's Nodes (Label) not named (a smaller lab than last
// time), eight at a time.
func Ensure(ctx context.Context, kc kubernetes.Interface, names []string, build func(name string) *corev1.Node) error {
	existing, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: Label})
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var create, remove []string
	have := map[string]bool{}
	for _, n := range existing.Items {
		have[n.Name] = true
		if !want[n.Name] {
			remove = append(remove, n.Name)
		}
	}
	for _, n := range names {
		if !have[n] {
			create = append(create, n)
		}
	}
	return parallel(ctx, 8, create, remove, func(ctx context.Context, name string, del bool) error {
		if del {
			err := kc.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		// A Node may be created with its status; kwok then adds conditions.
		_, err := kc.CoreV1().Nodes().Create(ctx, build(name), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		return nil
	})
}

// parallel runs fn over create (del false) and remove (del true) with
// workers goroutines, and returns the first error.
func parallel(ctx context.Context, workers int, create, remove []string, fn func(context.Context, string, bool) error) error {
	type item struct {
		name string
		del  bool
	}
	items := make(chan item)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range items {
				if err := fn(ctx, it.name, it.del); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range create {
		items <- item{n, false}
	}
	for _, n := range remove {
		items <- item{n, true}
	}
	close(items)
	wg.Wait()
	return first
}
