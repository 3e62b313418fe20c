// Package syncer mirrors node availability between Kubernetes and Slurm:
// a cordoned Node (or a slurmd pod, one a NodeSet owns, that is deleted or
// not Ready) drains its Slurm node with a reason onepool owns, and a drain or DOWN state that
// onepool did not make shows up on the slurmd pod and the Node. It acts only
// on a known Slurm state and never undoes a drain it did not make.
package syncer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/onepool/onepool/internal/requeue"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
)

// Field indexes on slurmd pods.
const (
	indexNodeName  = "spec.nodeName"
	indexSlurmNode = "onepool.slurmNode"
)

// PodReconciler is the syncer's controller over slurmd pods.
type PodReconciler struct {
	client   client.Client
	slurm    Slurm
	recorder events.EventRecorder
	opts     Options
	metrics  *metrics
	log      logr.Logger

	mu  sync.Mutex
	lag map[types.NamespacedName]time.Time
	// wrote is when onepool's last drain or resume of each Slurm node
	// returned. Until the cache has refreshed after it, the cache's view of
	// that node predates the write and decides nothing.
	wrote map[string]time.Time
	// recorded is the drain record onepool last wrote for each Slurm node.
	// Until the informer's Node (or pod) shows it, the cached record
	// predates the write and decides nothing (CI, 2026-11-26: a cached Node
	// without the new record and a poll showing the new drain made onepool
	// take its own drain for an admin's and drop its record for good).
	recorded map[string]recordWrite
}

// SlurmdPodSelector selects the pods the syncer watches: a cheap filter
// only. Which of them are slurmd pods is slurmnode.IsSlurmdPod's to say
// (a NodeSet owns them), checked on every reconcile.
func SlurmdPodSelector() map[string]string {
	return map[string]string{keys.LabelComponent: keys.ComponentSlurmd}
}

// Setup builds the syncer and registers it with mgr. notify (the Slurm
// cache; nil for none) delivers Slurm's changes; it must run in the same
// manager (leader only).
func Setup(mgr ctrl.Manager, slurm Slurm, notify slurmnode.Notifier, reg prometheus.Registerer, opts Options) (*PodReconciler, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("syncer options: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	r := &PodReconciler{
		client:   mgr.GetClient(),
		slurm:    slurm,
		recorder: mgr.GetEventRecorder("onepool-syncer"),
		opts:     opts,
		metrics:  m,
		log:      mgr.GetLogger().WithName("syncer"),
		lag:      map[types.NamespacedName]time.Time{},
		wrote:    map[string]time.Time{},
		recorded: map[string]recordWrite{},
	}
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexNodeName, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexSlurmNode, func(o client.Object) []string {
		if n := slurmnode.ServedBy(o.(*corev1.Pod)); n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := idx.IndexField(ctx, &corev1.Node{}, indexHostSlurmNode, r.hostIndex); err != nil {
		return nil, err
	}
	slurmEvents := slurmnode.NewEvents(notify)
	if err := mgr.Add(slurmEvents); err != nil {
		return nil, err
	}
	hasLabel := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[keys.LabelComponent] == keys.ComponentSlurmd
	})
	err = ctrl.NewControllerManagedBy(mgr).
		Named("onepool-syncer").
		For(&corev1.Pod{}, builder.WithPredicates(hasLabel)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.podsOnNode), builder.WithPredicates(nodeChanged())).
		WatchesRawSource(slurmEvents.Source(r.slurmChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, RateLimiter: requeue.Limiter()}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return r, nil
}
