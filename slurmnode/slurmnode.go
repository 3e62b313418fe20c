// Package slurmnode is node identity between Kubernetes and Slurm, both
// ways, and the Slurm view onepool's controllers share.
package slurmnode

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// Of is the Slurm node behind a Kubernetes Node: the Node's name, unless
// the label keys.LabelSlurmNodeName names another.
func Of(n *corev1.Node) string {
	if v := n.Labels[keys.LabelSlurmNodeName]; v != "" {
		return v
	}
	return n.Name
}

// ServedBy is the Slurm node a slurmd pod serves, as far as the pod itself
// says: its keys.AnnotationSlurmNode, else the Node it is bound to ("" when
// unbound). Only for a pod IsSlurmd takes for one: any other pod's
// annotation is its author's word.
func ServedBy(p *corev1.Pod) string {
	if n := p.Annotations[keys.AnnotationSlurmNode]; n != "" {
		return n
	}
	return p.Spec.NodeName
}

// KubeNode is the Kubernetes Node behind a Slurm node (the reverse of Of):
// the Node of that name unless its label names another Slurm node, else a
// Node whose label names it.
func KubeNode(nodes corelisters.NodeLister, slurmName string) (string, error) {
	if n, err := nodes.Get(slurmName); err == nil && Of(n) == slurmName {
		return n.Name, nil
	}
	all, err := nodes.List(labels.SelectorFromSet(labels.Set{keys.LabelSlurmNodeName: slurmName}))
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", fmt.Errorf("no Kubernetes node is Slurm node %s", slurmName)
	}
	return all[0].Name, nil
}

// Cached is the Slurm view the controllers share: reads through the cache
// (which answers slurmrest.ErrStale rather than old data), the one live read
// for what cannot be undone, and the writes through the client.
type Cached struct {
	Cache  *slurmrest.Cache
	Client *slurmrest.Client
}

// Node is the cached node, slurmrest.ErrStale or slurmrest.ErrNotFound.
func (s Cached) Node(name string) (slurmrest.Node, error) { return s.Cache.Node(name) }

// Nodes lists the cached nodes, or slurmrest.ErrStale.
func (s Cached) Nodes() ([]slurmrest.Node, error) { return s.Cache.Nodes() }

// NodeSyncedAt is when what Node(name) answers was asked of Slurm.
func (s Cached) NodeSyncedAt(name string) time.Time { return s.Cache.NodeSyncedAt(name) }

// LiveNode asks slurmrestd now.
func (s Cached) LiveNode(ctx context.Context, name string) (slurmrest.Node, error) {
	n, err := s.Client.GetNode(ctx, name)
	if err != nil {
		return slurmrest.Node{}, err
	}
	return *n, nil
}

func (s Cached) Drain(ctx context.Context, name, reason string) error {
	return s.Client.Drain(ctx, name, reason)
}

func (s Cached) Resume(ctx context.Context, name string) error {
	return s.Client.Resume(ctx, name)
}

func (s Cached) DeleteNode(ctx context.Context, name string) error {
	return s.Client.DeleteNode(ctx, name)
}

func (s Cached) SetFeatures(ctx context.Context, name string, features []string) error {
	return s.Client.SetFeatures(ctx, name, features)
}
