package kwoknodes

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A Node offers what its Slurm node has; a dynamic one is the lab
// kubelet's.
func TestNodes(t *testing.T) {
	n := Node("gpu-0")
	assert.Equal(t, "8", n.Status.Allocatable.Name("nvidia.com/gpu", "").String())
	assert.Equal(t, "64", n.Status.Allocatable.Cpu().String())
	assert.Equal(t, "true", n.Labels[Label])
	assert.NotContains(t, n.Annotations, Kubelet)
	assert.Equal(t, KubeletChroot, DynNode("dyn-0").Annotations[Kubelet])
}

// Ensure makes the Nodes that are missing, removes the lab's Nodes no
// longer named, and leaves the rest alone (a Node the lab did not make,
// one it made that is still wanted, even if changed since).
func TestEnsure(t *testing.T) {
	changed := Node("gpu-1")
	changed.Spec.Unschedulable = true
	kc := fake.NewClientset(changed, Node("gpu-9"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}})
	require.NoError(t, Ensure(context.Background(), kc, []string{"gpu-0", "gpu-1", "dyn-0"}, func(name string) *corev1.Node {
		if name == "dyn-0" {
			return DynNode(name)
		}
		return Node(name)
	}))
	list, err := kc.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
		switch n.Name {
		case "gpu-1":
			assert.True(t, n.Spec.Unschedulable, "a wanted Node is left as it is")
		case "dyn-0":
			assert.Equal(t, KubeletChroot, n.Annotations[Kubelet])
		}
	}
	slices.Sort(names)
	assert.Equal(t, []string{"dyn-0", "gpu-0", "gpu-1", "real"}, names)
}
