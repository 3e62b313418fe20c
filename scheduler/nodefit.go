package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubescheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodename"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeunschedulable"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/tainttoleration"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumebinding"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumezone"

	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
)

// NodeFit says which Nodes a pod cannot use before its job is asked of
// Slurm, with kube-scheduler's own Filter plugins (the same code and the
// same words as the scheduling cycle that binds the pod later), in its
// default order:
//
//   - what a pod says about nodes: a cordon, its node name, its
//     tolerations of the Node's taints, its node selector and required node
//     affinity (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity);
//     these decide from the pod and the Node alone;
//   - with a framework handle (the plugin's), its volumes' topology
//     (VolumeBinding, VolumeZone): a bound PersistentVolume's node affinity
//     and zone/region labels, and for an unbound WaitForFirstConsumer claim
//     whether a free PersistentVolume or its StorageClass (allowedTopologies,
//     CSIStorageCapacity) can serve it on the Node. These read PVCs, PVs,
//     StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities through
//     the handle's informer factory (NodeFit's own VolumeBinding, which
//     never assumes a binding, beside the profile's); without a handle
//     (NewNodeFit(ctx, nil)) they are not run.
//
// Resources are Slurm's to count. The volume checks that count the pods
// on a node (VolumeRestrictions, NodeVolumeLimits) are not run: NodeFit's
// Nodes carry no pods; the scheduling cycle runs them on the node Slurm
// gives.
type NodeFit struct {
	filters []filter
}

type filter struct {
	fwk.FilterPlugin
	pre fwk.PreFilterPlugin // nil when the plugin has none
}

// NewNodeFit builds the plugins with kube-scheduler's defaults (no added
// affinity, its default VolumeBindingArgs) and feature gates. h is the
// framework's handle: the volume filters are built on it, registering
// their informers with its factory, so NewNodeFit must run before the
// factory starts (in the plugin's factory); nil leaves them out.
func NewNodeFit(ctx context.Context, h fwk.Handle) (*NodeFit, error) {
	type mk struct {
		new  func(context.Context, runtime.Object, fwk.Handle, feature.Features) (fwk.Plugin, error)
		args runtime.Object
	}
	// kube-scheduler's default order: a node's first failure is its reason.
	plugins := []mk{
		{nodeunschedulable.New, nil},
		{nodename.New, nil},
		{tainttoleration.New, nil},
		{nodeaffinity.New, &config.NodeAffinityArgs{}},
	}
	if h != nil {
		args, err := defaultVolumeBindingArgs()
		if err != nil {
			return nil, fmt.Errorf("onepool: node filters: %w", err)
		}
		plugins = append(plugins, mk{volumebinding.New, args}, mk{volumezone.New, nil})
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	f := &NodeFit{}
	for _, mk := range plugins {
		p, err := mk.new(ctx, mk.args, h, fts)
		if err != nil {
			return nil, fmt.Errorf("onepool: node filters: %w", err)
		}
		fl := filter{FilterPlugin: p.(fwk.FilterPlugin)}
		fl.pre, _ = p.(fwk.PreFilterPlugin)
		f.filters = append(f.filters, fl)
	}
	return f, nil
}

// defaultVolumeBindingArgs are VolumeBinding's arguments as kube-scheduler
// defaults them (its bind timeout; none of them changes what Filter says).
func defaultVolumeBindingArgs() (*config.VolumeBindingArgs, error) {
	var v schedv1.VolumeBindingArgs
	kubescheme.Scheme.Default(&v)
	var args config.VolumeBindingArgs
	if err := kubescheme.Scheme.Convert(&v, &args, nil); err != nil {
		return nil, err
	}
	return &args, nil
}

// Unplaceable is a PreFilter's rejection of the pod on every node, as
// kube-scheduler reports it ("0/N nodes are available: <reasons>"): e.g.
// VolumeBinding's "pod has unbound immediate PersistentVolumeClaims", or a
// PersistentVolumeClaim that does not exist. It passes when a PVC, PV or
// StorageClass changes (manager.VolumeEventHandler).
type Unplaceable struct {
	Plugin  string
	Reasons []string
}

func (u *Unplaceable) Error() string { return strings.Join(u.Reasons, ", ") }

// Unfit returns, for each Node the pod cannot use, the filters' reasons
// (kube-scheduler's words, e.g. "node(s) didn't match Pod's node
// affinity/selector", "node(s) didn't match PersistentVolume's node
// affinity"). A Node every filter passes is not in it. As the framework
// does, every PreFilter runs first: one that rejects the pod is an
// *Unplaceable error, and a plugin's failure to decide (Error: a PVC's
// PersistentVolume not in the informer yet, say) any other error, to be
// tried again.
func (f *NodeFit) Unfit(ctx context.Context, pod *corev1.Pod, nodes []*corev1.Node) (map[string][]string, error) {
	pod = tolerateConditions(pod)
	infos := make([]fwk.NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		infos = append(infos, ni)
	}
	unfit := map[string][]string{}
	state := framework.NewCycleState()
	run := make([]fwk.FilterPlugin, 0, len(f.filters))
	for _, fl := range f.filters {
		if fl.pre == nil {
			run = append(run, fl)
			continue
		}
		res, st := fl.pre.PreFilter(ctx, state, pod, infos)
		switch {
		case st.IsSkip():
			continue
		case st.IsRejected():
			return nil, &Unplaceable{Plugin: fl.Name(), Reasons: reasonsOf(st)}
		case !st.IsSuccess():
			return nil, fmt.Errorf("running PreFilter plugin %q: %w", fl.Name(), st.AsError())
		case res != nil && !res.AllNodes():
			for _, n := range nodes {
				if _, done := unfit[n.Name]; !done && !res.NodeNames.Has(n.Name) {
					unfit[n.Name] = []string{fmt.Sprintf("node(s) didn't satisfy plugin %s", fl.Name())}
				}
			}
		}
		run = append(run, fl)
	}
	for _, ni := range infos {
		name := ni.Node().Name
		if _, done := unfit[name]; done {
			continue
		}
		for _, fl := range run {
			st := fl.Filter(ctx, state, pod, ni)
			if st.IsRejected() {
				unfit[name] = reasonsOf(st)
				break
			}
			if !st.IsSuccess() {
				return nil, fmt.Errorf("running Filter plugin %q on node %q: %w", fl.Name(), name, st.AsError())
			}
		}
	}
	return unfit, nil
}

// conditionTaints are the taints Kubernetes puts on a Node for a passing
// condition (not ready, unreachable, under pressure). A job's node list is
// fixed while it waits in Slurm's queue, so a Node is not left out for
// them: the pod binds once the condition passes.
var conditionTaints = []string{
	corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeMemoryPressure,
	corev1.TaintNodeDiskPressure, corev1.TaintNodePIDPressure, corev1.TaintNodeNetworkUnavailable,
}

// tolerateConditions is the pod as the filters see it here: tolerating
// the condition taints (a copy; the pod itself is not changed).
func tolerateConditions(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	for _, k := range conditionTaints {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists})
	}
	return p
}

func reasonsOf(st *fwk.Status) []string {
	if r := st.Reasons(); len(r) > 0 {
		return r
	}
	return []string{st.Message()}
}

// constraintsFor works out, for pods that will share one job (unfit: what
// NodeFit says of each), the Slurm nodes it must leave out: every Node none
// of them can use whose Slurm node exists (slurmNodes: Slurm's node names; a name
// Slurm does not know would fail the submission). With no Slurm node left
// the pods can use, msg says why, in kube-scheduler's manner ("no Slurm
// node fits: 3 node(s) didn't match Pod's node affinity/selector").
func constraintsFor(unfit []map[string][]string, nodes []*corev1.Node, slurmNodes map[string]bool) (excluded []string, msg string) {
	// The Node a Slurm node's job binds to (slurmnode.KubeNode): the Node
	// of its name, else one that names it with the label.
	bySlurm := map[string]*corev1.Node{}
	for _, n := range nodes {
		s := slurmnode.Of(n)
		if cur, ok := bySlurm[s]; slurmNodes[s] && (!ok || (cur.Name != s && (n.Name == s || n.Name < cur.Name))) {
			bySlurm[s] = n
		}
	}
	reasons := map[string]int{}
	fits := 0
	for s, n := range bySlurm {
		// Left out only when no pod of the job can use it: a gang's pods
		// are matched to its nodes after Slurm allocates them.
		var why []string
		for _, u := range unfit {
			r, ok := u[n.Name]
			if !ok {
				why = nil
				break
			}
			if why == nil {
				why = r
			}
		}
		if why == nil {
			fits++
			continue
		}
		excluded = append(excluded, s)
		for _, r := range why {
			reasons[r]++
		}
	}
	slices.Sort(excluded)
	if fits > 0 || len(excluded) == 0 {
		return excluded, ""
	}
	return nil, fmt.Sprintf("no Slurm node fits the pod: %s", histogram(reasons))
}

// histogram is kube-scheduler's "2 node(s) x, 1 node(s) y": most first.
func histogram(reasons map[string]int) string {
	type rc struct {
		r string
		n int
	}
	var all []rc
	for r, n := range reasons {
		all = append(all, rc{r, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].r < all[j].r
	})
	parts := make([]string, len(all))
	for i, x := range all {
		parts[i] = fmt.Sprintf("%d %s", x.n, x.r)
	}
	return strings.Join(parts, ", ")
}

// slurmNodeNamesTTL: Slurm's node names are read again after this long
// (nodes come and go rarely; a job that names a node Slurm no longer has
// is refused and asked again).
const slurmNodeNamesTTL = 30 * time.Second

// slurmNodeNamesMiss: a Node whose Slurm node is not among the names kept
// (a node that joined since) has them read again, at most this often (a
// Node that is no Slurm node at all, such as a control plane's, is missed
// every time).
const slurmNodeNamesMiss = 5 * time.Second

// slurmNodeNames reads Slurm's node names when a pod's constraints leave
// nodes out, and keeps them for a while (most pods need none), unless a
// Node to leave out names a Slurm node they lack.
type slurmNodeNames struct {
	list func(ctx context.Context, since time.Time) (*slurmrest.NodeList, error)
	ttl  time.Duration

	mu    sync.Mutex
	names map[string]bool
	at    time.Time
}

func newSlurmNodeNames(c *slurmrest.Client, ttl time.Duration) *slurmNodeNames {
	return &slurmNodeNames{list: c.ListNodes, ttl: ttl}
}

func (s *slurmNodeNames) get(ctx context.Context, want []string) (map[string]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	missing := slices.ContainsFunc(want, func(n string) bool { return !s.names[n] })
	if s.names != nil && time.Since(s.at) < s.ttl && (!missing || time.Since(s.at) < slurmNodeNamesMiss) {
		return s.names, nil
	}
	l, err := s.list(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(l.Nodes))
	for _, n := range l.Nodes {
		names[n.Name] = true
	}
	s.names, s.at = names, time.Now()
	return names, nil
}
