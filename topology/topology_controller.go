package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/onepool/onepool/slurmrest"
)

// ConfKey is the ConfigMap key holding topology.conf.
const ConfKey = "topology.conf"

// Options say which labels make the tree and where it goes.
type Options struct {
	// Levels are Node label keys from the top of the tree to its leaves.
	Levels []string
	// ConfigMap is where topology.conf is written (namespace/name); the
	// slurm chart mounts it beside slurm.conf.
	ConfigMap types.NamespacedName
	// Resync looks again this often even without a change.
	Resync time.Duration
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	var errs []error
	if len(o.Levels) == 0 {
		errs = append(errs, errors.New("topology: no label levels"))
	}
	seen := map[string]bool{}
	for _, l := range o.Levels {
		if l == "" || seen[l] {
			errs = append(errs, fmt.Errorf("topology: label level %q is empty or repeated", l))
		}
		seen[l] = true
	}
	if o.ConfigMap.Namespace == "" || o.ConfigMap.Name == "" {
		errs = append(errs, fmt.Errorf("topology: the ConfigMap needs namespace/name, not %q", o.ConfigMap.String()))
	}
	return errors.Join(errs...)
}

// ParseConfigMap reads "namespace/name".
func ParseConfigMap(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("topology ConfigMap %q: want namespace/name", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// SlurmNodes is what the controller needs of Slurm: its node names, or
// slurmrest.ErrStale when Slurm's state is unknown.
type SlurmNodes interface {
	Nodes() ([]slurmrest.Node, error)
}

// Reconciler keeps one ConfigMap's topology.conf equal to Render of Slurm's
// nodes and their Kubernetes Nodes' labels.
type Reconciler struct {
	client   client.Client
	reader   client.Reader // the ConfigMap, read live: no informer on every ConfigMap
	slurm    SlurmNodes
	opts     Options
	recorder events.EventRecorder
	log      logr.Logger

	mu       sync.Mutex
	reported map[string]string // node → the problem last reported
}

// Setup adds the controller to mgr: a change of Slurm's node list (cache),
// of a Node's labels, or the resync period writes the ConfigMap again.
func Setup(mgr ctrl.Manager, slurm SlurmNodes, cache *slurmrest.Cache, opts Options) (*Reconciler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	r := &Reconciler{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), slurm: slurm, opts: opts,
		recorder: mgr.GetEventRecorder("onepool-topology"),
		log:      mgr.GetLogger().WithName("topology"),
		reported: map[string]string{},
	}
	the := func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: opts.ConfigMap}}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("onepool-topology").
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(the), builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if cache != nil {
		// Slurm's nodes come and go (dynamic nodes): each is an event on a
		// channel, coalesced (one pending event is enough).
		ch := make(chan event.GenericEvent, 1)
		poke := func() {
			select {
			case ch <- event.GenericEvent{Object: &corev1.ConfigMap{}}:
			default:
			}
		}
		cache.AddNodeHandler(slurmrest.NodeHandler{
			Add:    func(*slurmrest.Node) { poke() },
			Delete: func(*slurmrest.Node) { poke() },
		})
		cache.AddStatusHandler(func(bool) { poke() })
		b = b.WatchesRawSource(source.Channel(ch, handler.EnqueueRequestsFromMapFunc(the)))
	}
	return r, b.Complete(r)
}
