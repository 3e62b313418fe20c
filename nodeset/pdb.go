package nodeset

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// buildPDB protects the NodeSet's busy pods from voluntary eviction (kubectl
// drain, the cluster autoscaler): maxUnavailable 0 over the pods whose Slurm
// node runs jobs. Idle pods are not selected and may go.
func buildPDB(ns *v1alpha1.NodeSet) *policyv1.PodDisruptionBudget {
	zero := intstr.FromInt32(0)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pdbName(ns.Name),
			Namespace:       ns.Namespace,
			Labels:          map[string]string{keys.LabelNodeSet: ns.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ns, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind))},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				keys.LabelNodeSet:   ns.Name,
				keys.LabelSlurmBusy: "true",
			}},
		},
	}
}

func pdbName(nodeSet string) string { return nodeSet + "-busy" }

func (r *Reconciler) ensurePDB(ctx context.Context, ns *v1alpha1.NodeSet) error {
	var have policyv1.PodDisruptionBudget
	err := r.client.Get(ctx, types.NamespacedName{Namespace: ns.Namespace, Name: pdbName(ns.Name)}, &have)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read PodDisruptionBudget: %w", err)
	}
	if err := r.client.Create(ctx, buildPDB(ns)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PodDisruptionBudget: %w", err)
	}
	return nil
}

func (r *Reconciler) deletePDB(ctx context.Context, ns *v1alpha1.NodeSet) error {
	err := r.client.Delete(ctx, buildPDB(ns))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodDisruptionBudget: %w", err)
	}
	return nil
}
