// Package nodeset runs slurmd as pods, one per selected GPU Node (the
// NodeSet), and keeps them Slurm-safe: a Node is taken away or its pod
// replaced only after its Slurm node is drained and no job runs there.
package nodeset

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/onepool/onepool/internal/requeue"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmnode"
)

// The backoff between replacements of a failed slurmd pod on one node
// (a DaemonSet's: 1 s, doubling, at most 15 min).
const (
	failedPodBackoff    = time.Second
	failedPodMaxBackoff = 15 * time.Minute
)

// Reconciler is the NodeSet controller.
type Reconciler struct {
	client   client.Client
	slurm    Slurm
	recorder events.EventRecorder
	opts     Options
	log      logr.Logger

	mu      sync.Mutex
	owner   map[string]types.NamespacedName // Slurm node → its NodeSet, from the last reconciles
	timeout map[string]bool                 // Slurm nodes already reported past their drain timeout
	// migFailed: the MIG layout whose failure was reported, per Slurm node.
	migFailed map[string]string
	// failed spaces out replacements of failed slurmd pods, per NodeSet
	// and node (as a DaemonSet's failedPodsBackoff).
	failed *flowcontrol.Backoff
	// podsOn reads the pods bound to a Node (Slurm's share is counted
	// from them); shareChecked is when each Node's was last counted again.
	podsOn       podsOnNode
	shareChecked map[string]time.Time
}

// Setup builds the controller and registers it with mgr. notify (the Slurm
// cache; nil for none) delivers Slurm's node changes; it must run in the
// same manager.
func Setup(mgr ctrl.Manager, slurm Slurm, notify slurmnode.Notifier, opts Options) (*Reconciler, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("nodeset options: %w", err)
	}
	r := &Reconciler{
		client:    mgr.GetClient(),
		slurm:     slurm,
		recorder:  mgr.GetEventRecorder("onepool-nodeset"),
		opts:      opts,
		log:       mgr.GetLogger().WithName("nodeset"),
		owner:     map[string]types.NamespacedName{},
		timeout:   map[string]bool{},
		migFailed: map[string]string{},
		failed:    flowcontrol.NewBackOff(failedPodBackoff, failedPodMaxBackoff),
		podsOn:    apiPodsOnNode(mgr.GetAPIReader()),

		shareChecked: map[string]time.Time{},
	}
	slurmEvents := slurmnode.NewEvents(notify)
	if err := mgr.Add(slurmEvents); err != nil {
		return nil, err
	}
	ownedPod := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[keys.LabelNodeSet] != "" })
	return r, ctrl.NewControllerManagedBy(mgr).
		Named("onepool-nodeset").
		For(&v1alpha1.NodeSet{}).
		Owns(&corev1.Pod{}, builder.WithPredicates(ownedPod)).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allNodeSets), builder.WithPredicates(nodeChanged())).
		WatchesRawSource(slurmEvents.Source(r.slurmChanged)).
		WithOptions(controller.Options{RateLimiter: requeue.Limiter()}).
		Complete(r)
}

// allNodeSets maps a Node event to every NodeSet: any of them may select it.
func (r *Reconciler) allNodeSets(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.NodeSetList
	if err := r.client.List(ctx, &list); err != nil {
		r.log.Error(err, "listing NodeSets for a Node event")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, ns := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns.Namespace, Name: ns.Name}})
	}
	return out
}

// nodeChanged lets through Node events that can change a NodeSet's choice:
// labels, taints, deletion. Status heartbeats are not.
func nodeChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e eventUpdate) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			return !equalMaps(o.Labels, n.Labels) || !equalTaints(o.Spec.Taints, n.Spec.Taints) ||
				(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
		},
	}
}

// slurmChanged maps a Slurm change to the NodeSet holding the node;
// every NodeSet when Slurm's state turns known or unknown.
func (r *Reconciler) slurmChanged(ctx context.Context, c slurmnode.Change) []reconcile.Request {
	if c.All {
		return r.allNodeSets(ctx, nil)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if key, ok := r.owner[c.Node]; ok {
		return []reconcile.Request{{NamespacedName: key}}
	}
	return nil
}

// remember records which NodeSet holds which Slurm nodes, so a Slurm event
// reaches it.
func (r *Reconciler) remember(key types.NamespacedName, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, k := range r.owner {
		if k == key {
			delete(r.owner, n)
		}
	}
	for _, n := range names {
		r.owner[n] = key
	}
}
