package slurmnode

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
)

func node(name, label string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if label != "" {
		n.Labels[keys.LabelSlurmNodeName] = label
	}
	return n
}

// Both ways agree: KubeNode(Of(n)) is n, with and without the label.
func TestIdentityBothWays(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nodes := []*corev1.Node{node("gpu-0", ""), node("k8s-a", "gpu-7"), node("gpu-7", "gpu-9"), node("empty", "")}
	for _, n := range nodes {
		require.NoError(t, idx.Add(n))
	}
	lister := corelisters.NewNodeLister(idx)
	for _, tc := range []struct{ kube, slurm string }{
		{"gpu-0", "gpu-0"}, // its own name
		{"k8s-a", "gpu-7"}, // the label names another Slurm node
		{"gpu-7", "gpu-9"}, // a Node named like a Slurm node it is not
		{"empty", "empty"},
	} {
		var n *corev1.Node
		for _, c := range nodes {
			if c.Name == tc.kube {
				n = c
			}
		}
		assert.Equal(t, tc.slurm, Of(n), "Of(%s)", tc.kube)
		got, err := KubeNode(lister, tc.slurm)
		require.NoError(t, err)
		assert.Equal(t, tc.kube, got, "KubeNode(%s)", tc.slurm)
	}
	_, err := KubeNode(lister, "gpu-42")
	assert.ErrorContains(t, err, "no Kubernetes node is Slurm node gpu-42")
}

func TestServedBy(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "k8s-a"}}
	assert.Equal(t, "k8s-a", ServedBy(p))
	p.Annotations = map[string]string{keys.AnnotationSlurmNode: "gpu-7"}
	assert.Equal(t, "gpu-7", ServedBy(p))
	assert.Empty(t, ServedBy(&corev1.Pod{}))
}
