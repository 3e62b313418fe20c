package slurmnode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// Which pods onepool takes for slurmd pods — the pods that may drain, keep
// or remove a Slurm node — is decided here and nowhere else.
//
// A slurmd pod is one a NodeSet owns: its controller owner reference names
// a NodeSet (group onepool.dev, kind NodeSet) that exists in the pod's
// namespace with that name and UID. Nothing a pod's author writes makes a
// pod one: not the label onepool.dev/component=slurmd (onepool's watches
// use it only to look at fewer pods), not spec.nodeName, not the Slurm node
// annotation, not an owner reference to a NodeSet that is not there or not
// the one it names. Only the garbage collector and the NodeSet controller
// write a NodeSet's UID into a pod, and a namespace user cannot make a
// NodeSet.
//
// The version is not part of the check: an owner reference written at an
// older version of the API names the same object by its UID.

// NodeSetRef is the pod's controller owner reference when it names a
// NodeSet; nil when it has none or it names something else.
func NodeSetRef(p *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != v1alpha1.GroupVersion.Group || ref.Kind != v1alpha1.NodeSetKind {
		return nil
	}
	return ref
}

// IsSlurmd is the rule: p is a slurmd pod of ns, the NodeSet its
// controller reference names, as read (nil: there is none by that name).
func IsSlurmd(p *corev1.Pod, ns *v1alpha1.NodeSet) bool {
	ref := NodeSetRef(p)
	return ref != nil && ns != nil && ref.UID != "" &&
		ns.Namespace == p.Namespace && ns.Name == ref.Name && ns.UID == ref.UID
}

// IsSlurmdPod reads the NodeSet p's controller reference names through r
// (the manager's cache) and applies IsSlurmd. Without the NodeSet API
// (its CRD not installed) no pod is one.
func IsSlurmdPod(ctx context.Context, r client.Reader, p *corev1.Pod) (bool, error) {
	ref := NodeSetRef(p)
	if ref == nil {
		return false, nil
	}
	ns := &v1alpha1.NodeSet{}
	err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, ns)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		ns = nil
	case err != nil:
		return false, fmt.Errorf("reading NodeSet %s/%s, the owner pod %s names: %w", p.Namespace, ref.Name, p.Name, err)
	}
	return IsSlurmd(p, ns), nil
}
