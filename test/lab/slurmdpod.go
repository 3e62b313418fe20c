package lab

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// HandNodeSet names the NodeSet that owns the slurmd pods the tests and
// benchmarks make by hand on the lab's static nodes (gpu-N, whose slurmd the
// lab runs itself). onepool takes a pod for a slurmd pod only when a NodeSet
// owns it, so these pods are made as the NodeSet controller makes its own:
// with a controller owner reference to a NodeSet. This NodeSet selects no
// Node, so its controller makes no pod of its own, and the hand-made pods
// carry no onepool.dev/nodeset label, so it never lists them: it drains,
// replaces and takes away none of them.
const HandNodeSet = "hand-made-slurmd"

// EnsureHandNodeSet makes HandNodeSet in namespace ns unless it is there,
// and returns the controller reference its pods carry.
func EnsureHandNodeSet(ctx context.Context, c client.Client, ns string) (metav1.OwnerReference, error) {
	if err := ServeNodeSets(ctx, c, ns); err != nil {
		return metav1.OwnerReference{}, err
	}
	want := &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: HandNodeSet, Namespace: ns},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{"lab.onepool.dev/no-node": "true"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/slurmd:lab",
			}}}},
		},
	}
	if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return metav1.OwnerReference{}, fmt.Errorf("create NodeSet %s/%s: %w", ns, HandNodeSet, err)
	}
	have := &v1alpha1.NodeSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: HandNodeSet}, have); err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("get NodeSet %s/%s: %w", ns, HandNodeSet, err)
	}
	if have.DeletionTimestamp != nil {
		return metav1.OwnerReference{}, fmt.Errorf("NodeSet %s/%s is being deleted", ns, HandNodeSet)
	}
	return *metav1.NewControllerRef(have, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind)), nil
}

// HandSlurmdPod is a slurmd pod named name in namespace ns on node, owned
// by owner (EnsureHandNodeSet's reference).
func HandSlurmdPod(owner metav1.OwnerReference, ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:          map[string]string{keys.LabelComponent: keys.ComponentSlurmd},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "slurmd", Image: "onepool/slurmd:lab"}}},
	}
}

// ServeNodeSets makes namespace ns unless it is there and labels it as one
// that holds NodeSets: onepool's controller manager may make, delete and
// change pods there (the onepool chart's pod policy), as an admin labels
// the namespace of the slurm chart.
func ServeNodeSets(ctx context.Context, c client.Client, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{keys.LabelNodeSetNamespace: "true"}}})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, keys.LabelNodeSetNamespace)
	if err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling namespace %s %s=true: %w", ns, keys.LabelNodeSetNamespace, err)
	}
	return nil
}
