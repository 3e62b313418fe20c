package slurmnode

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/onepool/onepool/slurmrest"
)

// Notifier tells of changes in Slurm's node table: the Slurm cache.
type Notifier interface {
	AddNodeHandler(slurmrest.NodeHandler)
	AddStatusHandler(func(stale bool))
}

// Change is what a controller hears from Slurm: one node changed, or
// (All) Slurm's state became known, or unknown, again, and anything may
// have changed.
type Change struct {
	Node  string // the Slurm node's name; "" with All
	All   bool
	Stale bool // with All: Slurm's state is unknown now
}

// Events brings a Notifier's changes to a controller, through
// controller-runtime's source for events from outside the cluster
// (source.Channel). The Notifier's handlers never block: changes wait,
// coalesced, until the controller takes them.
type Events struct {
	mu      sync.Mutex
	pending map[Change]bool
	order   []Change
	wake    chan struct{}
	out     chan event.TypedGenericEvent[Change]
}

// NewEvents listens to n (nil: no Slurm events; the controllers' resync
// still looks).
func NewEvents(n Notifier) *Events {
	e := &Events{pending: map[Change]bool{}, wake: make(chan struct{}, 1), out: make(chan event.TypedGenericEvent[Change])}
	if n != nil {
		changed := func(node *slurmrest.Node) { e.add(Change{Node: node.Name}) }
		n.AddNodeHandler(slurmrest.NodeHandler{
			Add:    changed,
			Update: func(_, node *slurmrest.Node) { changed(node) },
			Delete: changed,
		})
		n.AddStatusHandler(func(stale bool) { e.add(Change{All: true, Stale: stale}) })
	}
	return e
}

func (e *Events) add(c Change) {
	e.mu.Lock()
	if !e.pending[c] {
		e.pending[c] = true
		e.order = append(e.order, c)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Source is the controller's source of Slurm changes, each mapped to
// requests by toRequests.
func (e *Events) Source(toRequests func(context.Context, Change) []reconcile.Request) source.Source {
	return source.Channel(e.out, handler.TypedEnqueueRequestsFromMapFunc(toRequests))
}

// Start hands the changes to the controller's source until ctx ends
// (a manager Runnable: mgr.Add(events)).
func (e *Events) Start(ctx context.Context) error {
	for {
		e.mu.Lock()
		batch := e.order
		e.order, e.pending = nil, map[Change]bool{}
		e.mu.Unlock()
		for _, c := range batch {
			select {
			case e.out <- event.TypedGenericEvent[Change]{Object: c}:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-e.wake:
		case <-ctx.Done():
			return nil
		}
	}
}
