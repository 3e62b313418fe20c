package tenancy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// StatusReconciler keeps each TenantPolicy's status: the namespaces it
// covers and whether another policy covers one of them too.
type StatusReconciler struct {
	Client client.Client
}

// SetupStatus registers the status controller with mgr.
func SetupStatus(mgr ctrl.Manager) error {
	r := &StatusReconciler{Client: mgr.GetClient()}
	return ctrl.NewControllerManagedBy(mgr).
		Named("onepool-tenantpolicy-status").
		For(&v1alpha1.TenantPolicy{}).
		// A namespace made, relabelled or deleted, or another policy
		// changed: every policy's count and conflicts may change.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.all)).
		Watches(&v1alpha1.TenantPolicy{}, handler.EnqueueRequestsFromMapFunc(r.all)).
		Complete(r)
}

func (r *StatusReconciler) all(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.TenantPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

func (r *StatusReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.TenantPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	list := &v1alpha1.TenantPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing TenantPolicies: %w", err)
	}
	nss := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nss); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing namespaces: %w", err)
	}
	all := make([]*v1alpha1.TenantPolicy, len(list.Items))
	for i := range list.Items {
		all[i] = &list.Items[i]
	}
	st := Status(p, all, nss.Items)
	if equality.Semantic.DeepEqual(st, p.Status) {
		return reconcile.Result{}, nil
	}
	p.Status = st
	if err := r.Client.Status().Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}
