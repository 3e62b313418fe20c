package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
)

// fitter answers where the pods may run: the Slurm nodes a job must leave
// out (kube-scheduler's filters, run by NodeFit, and the Nodes without GPU
// devices for a pod with a GPU claim), whether a node Slurm chose suits a
// pod, and the Kubernetes node of a Slurm node. A nil fit: Slurm is told
// no node constraint.
type fitter struct {
	fit        *NodeFit
	nodes      corelisters.NodeLister
	slices     resourcelisters.ResourceSliceLister
	slurmNodes func(ctx context.Context, want []string) (map[string]bool, error)
}

// kubeNode maps a Slurm node name to its Kubernetes node: the node of that
// name, unless a node claims it with the override label.
func (c *fitter) kubeNode(slurmNode string) (string, error) {
	return slurmnode.KubeNode(c.nodes, slurmNode)
}

// misfit says why the pod cannot use node, as kube-scheduler's filters
// NodeFit runs say ("" it can): the framework would never bind it there.
// A passing Node condition is no reason (the pod waits it out), nor is a
// rejection of the pod on every node (a PVC not bound yet): the scheduling
// cycle says that one, and the job keeps its node.
func (c *fitter) misfit(node string, pod *corev1.Pod) string {
	if c.fit == nil {
		return ""
	}
	n, err := c.nodes.Get(node)
	if err != nil {
		return ""
	}
	unfit, _ := c.fit.Unfit(context.Background(), pod, []*corev1.Node{n})
	return strings.Join(unfit[node], ", ")
}

// exclude is what the pods' node constraints tell Slurm: the Slurm
// nodes their job must leave out. msg says why nothing can be asked when
// no Slurm node fits, or a pod fits no node at all (NodeFit's Unplaceable);
// err is a failure to find out (retried).
func (c *fitter) exclude(ctx context.Context, members []*corev1.Pod, avoid []string) (excluded []string, msg string, err error) {
	if c.fit == nil || c.nodes == nil {
		return avoid, "", nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, "", fmt.Errorf("listing Nodes: %w", err)
	}
	noDevices, err := c.withoutGPUDevices(members, nodes)
	if err != nil {
		return nil, "", err
	}
	unfit := make([]map[string][]string, len(members))
	for i, m := range members {
		var nowhere *Unplaceable
		unfit[i], err = c.fit.Unfit(ctx, m, nodes)
		if errors.As(err, &nowhere) {
			// No Node can take the pod now (a claim not bound yet): its
			// job would hold nodes it cannot use. It waits for a change.
			if len(members) > 1 {
				return nil, fmt.Sprintf("no Slurm node fits pod %s: %v", m.Name, nowhere), nil
			}
			return nil, fmt.Sprintf("no Slurm node fits the pod: %v", nowhere), nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("node filters: %w", err)
		}
		if _, claimed, _ := gpuClaimName(m); claimed {
			for _, n := range noDevices {
				if _, ok := unfit[i][n]; !ok {
					unfit[i][n] = []string{reasonNoGPUDevices}
				}
			}
		}
		if len(unfit[i]) == 0 {
			return avoid, "", nil // a pod of the job may use any node
		}
	}
	var want []string
	for _, n := range nodes {
		if slices.ContainsFunc(unfit, func(u map[string][]string) bool { _, ok := u[n.Name]; return ok }) {
			want = append(want, slurmnode.Of(n))
		}
	}
	names, err := c.slurmNodes(ctx, want)
	if err != nil {
		return nil, "", fmt.Errorf("reading Slurm's node names (to leave out the nodes the pod cannot use): %w", err)
	}
	excluded, msg = constraintsFor(unfit, nodes, names)
	if msg != "" {
		return nil, msg, nil
	}
	for _, a := range avoid {
		if !slices.Contains(excluded, a) {
			excluded = append(excluded, a)
		}
	}
	slices.Sort(excluded)
	return excluded, "", nil
}

// reasonNoGPUDevices: a pod with a GPU claim cannot use a Node whose node
// agent publishes no devices (its claim could never be allocated there).
var reasonNoGPUDevices = fmt.Sprintf("node(s) publish no GPU devices of %s (DRA)", keys.GPUDriverName)

// withoutGPUDevices lists the Nodes that publish no ResourceSlice of
// onepool's DRA driver, when one of members has a GPU claim (nil else).
func (c *fitter) withoutGPUDevices(members []*corev1.Pod, nodes []*corev1.Node) ([]string, error) {
	if c.slices == nil || !slices.ContainsFunc(members, func(m *corev1.Pod) bool { _, ok, _ := gpuClaimName(m); return ok }) {
		return nil, nil
	}
	rs, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	has := map[string]bool{}
	for _, s := range rs {
		if s.Spec.Driver == keys.GPUDriverName {
			has[s.Spec.Pool.Name] = true
		}
	}
	var out []string
	for _, n := range nodes {
		if !has[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out, nil
}
