package syncer

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
)

// nodeChanged passes Node events that can change a decision: cordon,
// the cordon reason, the Slurm name override.
func nodeChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			// Any label: the host-slurmd selector's among them.
			return o.Spec.Unschedulable != n.Spec.Unschedulable ||
				o.Annotations[keys.AnnotationCordonReason] != n.Annotations[keys.AnnotationCordonReason] ||
				!maps.Equal(o.Labels, n.Labels)
		},
	}
}

// podsOnNode maps a Node to the slurmd pods bound to it, and to itself
// when it is (or was) a host-slurmd Node.
func (r *PodReconciler) podsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := r.listRequests(ctx, client.MatchingFields{indexNodeName: o.GetName()})
	if r.opts.HostNodes != nil && !r.opts.HostNodes.Empty() {
		reqs = append(reqs, hostRequest(o.GetName()))
	}
	r.markLag(reqs)
	return reqs
}

// slurmChanged maps a Slurm change to the slurmd pods it concerns: the
// pods serving a changed node; every slurmd pod when Slurm's state is
// known again (what waited for a known state goes now).
func (r *PodReconciler) slurmChanged(ctx context.Context, c slurmnode.Change) []reconcile.Request {
	switch {
	case c.All && c.Stale:
		return nil
	case c.All:
		return append(r.listRequests(ctx, client.MatchingLabels(SlurmdPodSelector())), r.hostRequests(ctx, "")...)
	}
	reqs := append(r.listRequests(ctx, client.MatchingFields{indexSlurmNode: c.Node}), r.hostRequests(ctx, c.Node)...)
	r.markLag(reqs)
	return reqs
}

func (r *PodReconciler) listRequests(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, opts...); err != nil {
		r.log.Error(err, "listing slurmd pods from the informer cache")
		return nil
	}
	var reqs []reconcile.Request
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[keys.LabelComponent] != keys.ComponentSlurmd {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return reqs
}

// markLag notes when a change was first asked for, for the sync-lag histogram.
func (r *PodReconciler) markLag(reqs []reconcile.Request) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range reqs {
		if _, ok := r.lag[req.NamespacedName]; !ok {
			r.lag[req.NamespacedName] = now
		}
	}
}

// observeLag records the lag of a change just made and forgets the mark.
func (r *PodReconciler) observeLag(key types.NamespacedName, direction string, acted bool) {
	r.mu.Lock()
	since, ok := r.lag[key]
	delete(r.lag, key)
	r.mu.Unlock()
	if ok && acted {
		r.metrics.lag.WithLabelValues(direction).Observe(time.Since(since).Seconds())
	}
}
