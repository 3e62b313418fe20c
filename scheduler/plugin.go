// Package scheduler is onepool's kube-scheduler plugin: a pod with
// schedulerName onepool waits in Slurm's queue as a placeholder job and is
// bound to the node Slurm allocates. The plugin is a thin shim; the manager holds
// the logic.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/onepool/onepool/internal/tokenevents"
	"github.com/onepool/onepool/slurmrest"
	tenancyv1alpha1 "github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "Onepool"

// Plugin places pods through Slurm at PreFilter.
type Plugin struct {
	core *manager
}

var (
	_ fwk.PreEnqueuePlugin  = (*Plugin)(nil)
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.PreBindPlugin     = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
)

// Factory is the plugin factory the scheduler calls once per profile.
// leader says whether this replica holds the scheduler's lease (see
// LeaderGate); every replica builds its plugin, only the leader acts.
func Factory(leader Leadership) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, h, leader)
	}
}

func newPlugin(ctx context.Context, obj runtime.Object, h fwk.Handle, leader Leadership) (fwk.Plugin, error) {
	args, err := argsFrom(obj)
	if err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx).WithName("onepool")
	// kube-scheduler's own registry, served on its /metrics.
	reg := legacyregistry.Registerer()
	client, err := slurmrest.New(slurmrest.Config{URL: args.SlurmrestURL, TokenFile: args.TokenFile, JWTKeyFile: args.JWTKeyFile,
		TokenUser: args.TokenUser, TokenLifetime: args.TokenLifetime.Duration, CAFile: args.SlurmrestCAFile,
		APIVersion: args.SlurmrestAPIVersion, Timeout: args.RequestTimeout.Duration, Registerer: reg,
		OnTokenProblem: tokenevents.FromEnv(h.EventRecorder(), log.WithName("slurmrest"))})
	if err != nil {
		return nil, fmt.Errorf("onepool: %w", err)
	}
	// The scheduler reads Slurm's jobs; nodes it takes from Kubernetes.
	// It holds onepool's placeholders alone (manager.Run keeps them) and
	// follows them by id: a queue of other users' jobs costs it one
	// listing at start, and one after a submission whose answer was lost.
	jobs := slurmrest.NewCache(client, slurmrest.CacheConfig{
		PollInterval: args.PollInterval.Duration, StaleAfter: args.StaleAfter.Duration, Watch: slurmrest.WatchJobs,
		JobListEvery: args.JobListInterval.Duration, FollowJobs: true,
		Logger: log.WithName("slurm-cache"),
	})
	dyn, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("onepool: %w", err)
	}
	// Built on the handle before the framework starts its informer
	// factory: the volume filters' informers start with it.
	fit, err := NewNodeFit(ctx, h)
	if err != nil {
		return nil, err
	}
	pods := h.SharedInformerFactory().Core().V1().Pods()
	dra := h.SharedInformerFactory().Resource().V1()
	// TenantPolicies through a dynamic informer of their own (the
	// framework's factory knows only Kubernetes' types).
	policies := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(tenancyv1alpha1.Resource)
	namespaces := h.SharedInformerFactory().Core().V1().Namespaces()
	core, err := newManager(managerConfig{
		Args: args, Log: log, Slurm: client, Jobs: jobs, Kube: h.ClientSet(),
		Groups:  DynamicGroups{Client: dyn},
		Tenants: InformerTenants{Policies: policies.Lister(), Namespaces: namespaces.Lister(), Default: args.DefaultTenantPolicy},
		Nodes:   h.SharedInformerFactory().Core().V1().Nodes().Lister(),
		Slices:  dra.ResourceSlices().Lister(), Claims: dra.ResourceClaims().Lister(),
		Fit: fit, SlurmNodes: newSlurmNodeNames(client, slurmNodeNamesTTL).get,
		Recorder: h.EventRecorder(), Leader: leader, Registerer: reg, OwnUser: client.OwnUser,
		Activate: func(ps []*corev1.Pod) {
			if len(ps) == 0 {
				return
			}
			m := make(map[string]*corev1.Pod, len(ps))
			for _, p := range ps {
				m[p.Namespace+"/"+p.Name] = p
			}
			h.Activate(log, m)
		},
	})
	if err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{gpuCollector{jobs: jobs.Jobs, pods: pods.Lister()}, placementCollector{rec: core.rec, leader: core.leader}} {
		if err := registerCollector(reg, c); err != nil {
			return nil, fmt.Errorf("onepool: metrics: %w", err)
		}
	}
	l, err := core.Listen()
	if err != nil {
		return nil, err
	}
	if _, err := pods.Informer().AddEventHandler(core.PodEventHandler()); err != nil {
		l.Close()
		return nil, fmt.Errorf("onepool: %w", err)
	}
	if _, err := policies.Informer().AddEventHandler(core.PolicyEventHandler()); err != nil {
		l.Close()
		return nil, fmt.Errorf("onepool: %w", err)
	}
	// The framework drops managedFields from its pods, not from its
	// Nodes; nothing here reads them (issue 38: 17 of 78 MiB of heap at
	// 10,000 Nodes). An informer already running keeps them.
	if err := h.SharedInformerFactory().Core().V1().Nodes().Informer().SetTransform(stripManagedFields); err != nil {
		log.V(2).Info("the Node informer keeps managedFields", "err", err.Error())
	}
	if _, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(core.NodeEventHandler()); err != nil {
		l.Close()
		return nil, fmt.Errorf("onepool: %w", err)
	}
	if _, err := dra.ResourceSlices().Informer().AddEventHandler(core.NodeEventHandler()); err != nil {
		l.Close()
		return nil, fmt.Errorf("onepool: %w", err)
	}
	if _, err := namespaces.Informer().AddEventHandler(core.NamespaceEventHandler()); err != nil {
		l.Close()
		return nil, fmt.Errorf("onepool: %w", err)
	}
	// The objects NodeFit's volume filters read.
	core1, storage := h.SharedInformerFactory().Core().V1(), h.SharedInformerFactory().Storage().V1()
	volumes := []cache.SharedIndexInformer{core1.PersistentVolumeClaims().Informer(), core1.PersistentVolumes().Informer(),
		storage.StorageClasses().Informer(), storage.CSIStorageCapacities().Informer()}
	for _, inf := range volumes {
		if _, err := inf.AddEventHandler(core.VolumeEventHandler()); err != nil {
			l.Close()
			return nil, fmt.Errorf("onepool: %w", err)
		}
	}
	go policies.Informer().Run(ctx.Done())
	synced := func() bool {
		// Submitted before the claims are known, a pod would wait for one
		// "not found" until its Add.
		return pods.Informer().HasSynced() && namespaces.Informer().HasSynced() && policies.Informer().HasSynced() &&
			!slices.ContainsFunc(volumes, func(i cache.SharedIndexInformer) bool { return !i.HasSynced() })
	}
	go core.Run(ctx, synced, jobs, l)
	return &Plugin{core: core}, nil
}

func (pl *Plugin) Name() string { return Name }

// PreEnqueue keeps a pod out of the scheduling queue while its first ask
// to Slurm is in flight: once Slurm answers (granted at once, queued, or a
// failure) the pod is activated, and one cycle binds it or says why it
// waits. A cycle that could only reject it would cost a status update and
// put the pod behind every newer one (a burst then binds no pod until all
// have been rejected once).
func (pl *Plugin) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	if msg, gated := pl.core.Gate(pod); gated {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
	}
	return nil
}

// PreFilter narrows the pod to the node Slurm allocated, or rejects it
// with the reason it still waits; Slurm, not Kubernetes, preempts, so the
// rejection is unresolvable by preemption.
func (pl *Plugin) PreFilter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	d := pl.core.Place(pod)
	if d.Node == "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, d.Message)
	}
	return &fwk.PreFilterResult{NodeNames: sets.New(d.Node)}, nil
}

func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// PreBindPreFlight skips PreBind but for pods with an onepool GPU claim: only pods with an onepool GPU claim need PreBind.
func (pl *Plugin) PreBindPreFlight(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) *fwk.Status {
	if _, ok, _ := gpuClaimName(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// PreBind writes the pod's GPU claim from Slurm's GRES indices before the
// pod is bound; a claim that cannot be written keeps the pod unbound.
func (pl *Plugin) PreBind(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	if err := pl.core.claimer.allocate(ctx, pod, node); err != nil {
		if errors.Is(err, ErrGPUClaim) {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		return fwk.AsStatus(err)
	}
	return nil
}

// EventsToRegister names what requeues pods: pods this plugin rejected come back through
// Handle.Activate when their Slurm job changes. Among cluster events only
// these can help: the pod itself asks something else now, a gang gains a
// member, or a Node appears (for a Slurm node that had none). Node and
// ResourceSlice changes that may let a pod's node constraints be met wake
// it through manager.NodeEventHandler; PVC, PV, StorageClass and
// CSIStorageCapacity changes through manager.VolumeEventHandler.
func (pl *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: askChangedHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add}, QueueingHintFn: gangGrewHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
		// A node agent that publishes its GPUs late: pods whose GPU claim
		// could not be allocated try again.
		{Event: fwk.ClusterEvent{Resource: fwk.ResourceSlice, ActionType: fwk.Add | fwk.Update}},
	}, nil
}

func askChangedHint(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if ok1 && ok2 && n.UID == pod.UID && askChanged(o, n) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func gangGrewHint(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	n, ok := newObj.(*corev1.Pod)
	if g := ownerOf(pod); ok && g.group() && n.UID != pod.UID && g.has(n) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// stripManagedFields is an informer transform that drops an object's
// managedFields before it is cached.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
