package nodeset

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmrest"
)

// slurmView is one node as the Slurm cache knows it.
type slurmView struct {
	known bool // the cache is fresh; false: nothing may be decided on Slurm's state
	found bool // Slurm has a record of the node
	node  slurmrest.Node
}

// nodeState is everything the NodeSet decides one Slurm node on.
type nodeState struct {
	slurmName   string
	nodeName    string // the Kubernetes Node; may no longer exist
	node        *corev1.Node
	wanted      bool          // the Node is feasible and the NodeSet not being deleted
	pod         *corev1.Pod   // the live slurmd pod, nil if none
	twins       []*corev1.Pod // more live pods on the same node: deleted
	terminating int           // pods on their way out
	// orphans are terminating pods bound to a Node that no longer exists:
	// no kubelet will ever stop them (Kubernetes' pod garbage collector
	// force-deletes such pods where kube-controller-manager runs).
	orphans []*corev1.Pod
	// record is the NodeSet's record of its drain, on the Node.
	record drain.Record
	slurm  slurmView
	// failedBackoff: the live pod failed (phase Failed: evicted by the
	// kubelet, refused at admission), and this long remains before it may
	// be replaced; zero once it may.
	failedBackoff time.Duration
}

// ownDrain says the Slurm node is drained by this controller: a reason of
// its form that it recorded when it drained. Only such a drain is resumed.
func (n nodeState) ownDrain() bool {
	s := n.slurm
	if !s.found {
		return false
	}
	owner, _ := drain.Records{NodeSet: n.record}.Owner(s.node.State.Drain(), s.node.Reason, s.node.ReasonChanged)
	return owner == drain.NodeSet
}

type action int

const (
	actNone action = iota
	actCreate
	actDrain
	actDeletePod
	actResume
	actDeleteSlurmNode
	actWait
	actForceDelete // the orphans: their Node is gone
	actReplaceFailed
	actSetFeatures
	actSetMIGConfig
)

func (a action) String() string {
	return [...]string{"none", "create", "drain", "delete-pod", "resume", "delete-slurm-node", "wait", "force-delete", "replace-failed", "set-features", "set-mig-config"}[a]
}

// step is what to do next for one node; one step per reconcile, the rest
// follows from the change it makes.
type step struct {
	act    action
	reason string    // drain reason
	why    string    // for wait: what it waits for; for a Slurm node removed: why
	busy   bool      // waiting for jobs to end
	since  time.Time // for busy: when the drain began
	// features to set in Slurm (actSetFeatures)
	features []string
	// layout is the MIG layout to hand to mig-manager (actSetMIGConfig);
	// migFailed says a wait is on mig-manager's failure to apply it.
	layout    string
	migFailed bool
}

// params are the NodeSet-wide inputs of a decision.
type params struct {
	hash       string
	onDelete   bool   // OnDelete strategy: outdated pods stay
	leftReason string // "onepool: node left nodeset <name>"
	slurm      v1alpha1.SlurmNodeSpec
}

// outdated says the pod is not of the NodeSet's template now.
func (n nodeState) outdated(p params) bool {
	return n.pod != nil && !p.onDelete && n.pod.Labels[keys.LabelTemplateHash] != p.hash
}

// stale says the pod must be replaced: not of the template now, or its
// Node asks another MIG layout (whatever the update strategy: the label is
// a request for that Node).
func (n nodeState) stale(p params) bool {
	return n.outdated(p) || n.reconfigure()
}

// replaceReason is the drain reason of a stale pod's replacement.
func (n nodeState) replaceReason() string {
	if n.reconfigure() {
		return drain.MIGConfigReason(migOf(n.node).want)
	}
	return drain.ReasonNodeSetUpdate
}

// updating says the node is drained for a replacement of its pod by this
// NodeSet (a rolling update, a MIG layout change).
func (n nodeState) updating() bool {
	return n.slurm.found && n.slurm.node.State.Drain() && drain.ReplacesPod(n.slurm.node.Reason)
}

// unavailable says the node counts against maxUnavailable.
func (n nodeState) unavailable() bool {
	if n.pod == nil || !podReady(n.pod) {
		return true
	}
	if n.slurm.known && !n.slurm.found {
		return true // not registered (yet, or again after an update)
	}
	return n.slurm.found && n.slurm.node.State.Drain() && drain.Form(n.slurm.node.Reason) == drain.NodeSet
}

// planNode decides one node, except for starting a rolling update, which
// planUpdates decides for the whole NodeSet (update=true here means chosen).
func planNode(n nodeState, p params, update bool) step {
	s := n.slurm
	if !n.wanted {
		if n.pod != nil {
			return takeAway(n, p.leftReason)
		}
		if n.terminating > 0 {
			return terminating(n)
		}
		if s.known && s.found && s.node.State.Drain() && !s.node.State.Busy() &&
			drain.Shows(s.node.Reason, p.leftReason) {
			return step{act: actDeleteSlurmNode}
		}
		return step{}
	}
	if n.pod == nil {
		if n.terminating > 0 {
			return step{act: actWait, why: "the old slurmd pod is terminating"}
		}
		// The MIG layout the Node asks comes before its slurmd pod.
		if st, ok := migBeforeCreate(n); ok {
			return st
		}
		// Its pod was replaced for an update: the Slurm node, drained for
		// it and free, goes first, so the new pod's slurmd registers it
		// afresh with the new template's CPUs, memory, GRES and features.
		// Slurm keeps a dynamic node's record as it was when slurmd
		// registers again (measured on the lab: CPUs=8 in the new template,
		// CPUTot=16 still).
		if s.known && n.ownDrain() && !s.node.State.Busy() && drain.ReplacesPod(s.node.Reason) {
			return step{act: actDeleteSlurmNode, why: "its new slurmd pod registers it again, with the new template"}
		}
		return step{act: actCreate}
	}
	if podFailed(n.pod) {
		// No slurmd runs there: replacing the pod takes nothing away. Like a
		// DaemonSet's, after a backoff that grows with each failure.
		if n.failedBackoff > 0 {
			return step{act: actWait, why: "the slurmd pod failed; it is replaced after a backoff of " + n.failedBackoff.String()}
		}
		return step{act: actReplaceFailed}
	}
	if n.stale(p) {
		if update || n.updating() {
			return takeAway(n, n.replaceReason())
		}
		return step{}
	}
	// A current pod: give the node back if this NodeSet drained it (by its
	// record: an admin's drain in the NodeSet's words stays).
	if s.known && n.ownDrain() {
		if !podReady(n.pod) {
			return step{act: actWait, why: "the new slurmd pod is not Ready"}
		}
		if !registeredSince(s.node, n.pod) {
			return step{act: actWait, why: "slurmd has not registered with Slurm since its pod started"}
		}
		return step{act: actResume}
	}
	// Its Node's FeatureLabels changed after slurmd registered: Slurm
	// keeps a dynamic node's features when slurmd registers again, so they
	// are set in Slurm (no drain, no new pod: nothing of a job changes).
	if s.known && s.found && registeredSince(s.node, n.pod) {
		if f := featuresToSet(p.slurm, n.node, s.node.Features); f != nil {
			return step{act: actSetFeatures, features: f}
		}
	}
	return step{}
}

// terminating waits for pods on their way out; pods whose Node is gone
// are force-deleted once Slurm runs nothing there (drained and free, or no
// record): nothing else would ever end them.
func terminating(n nodeState) step {
	s := n.slurm
	free := s.known && (!s.found || (s.node.State.Drain() && !s.node.State.Busy()))
	if len(n.orphans) == n.terminating && free {
		return step{act: actForceDelete}
	}
	if len(n.orphans) > 0 && s.found && s.node.State.Busy() {
		return step{act: actWait, why: "the old slurmd pod's Node is gone and jobs still run on the Slurm node", busy: true, since: s.node.ReasonChanged}
	}
	return step{act: actWait, why: "the old slurmd pod is terminating"}
}

// takeAway drains the Slurm node and deletes its pod once no job runs there.
func takeAway(n nodeState, reason string) step {
	s := n.slurm
	switch {
	case !s.known:
		return step{act: actWait, why: "Slurm's state is unknown"}
	case !s.found:
		// Never registered (or already removed): nothing can run there.
		return step{act: actDeletePod}
	case !s.node.State.Drain():
		return step{act: actDrain, reason: reason}
	case !drain.ReplacesPod(reason) && drain.Form(s.node.Reason) == drain.Syncer:
		// The node leaves: the record goes too, so the drain becomes ours.
		return step{act: actDrain, reason: reason}
	case !drain.ReplacesPod(reason) && n.ownDrain() && !drain.Shows(s.node.Reason, reason):
		// The node leaves while the NodeSet's update drain holds (the
		// NodeSet deleted mid-update): drained again for leaving, so its
		// Slurm node is removed once free instead of staying drained.
		return step{act: actDrain, reason: reason}
	case s.node.State.Busy():
		return step{act: actWait, why: "jobs still run on the Slurm node", busy: true, since: s.node.ReasonChanged}
	}
	return step{act: actDeletePod}
}

// registeredSince says slurmd (re)registered after the pod was made, and
// answers: the new slurmd is the one Slurm sees.
func registeredSince(n slurmrest.Node, pod *corev1.Pod) bool {
	st := n.State
	if st.Base() == slurmrest.NodeDown || st.Has("NOT_RESPONDING") {
		return false
	}
	return !n.SlurmdStarted.Before(pod.CreationTimestamp.Time)
}

// planUpdates picks the stale nodes whose replacement starts now (a
// rolling update, a MIG layout change):
// nodes already out of service (drained by someone else, idle) at once, and
// others while fewer than maxUnavailable nodes are out. Idle nodes go first
// so busy ones get longest to finish their jobs.
func planUpdates(nodes []nodeState, p params, maxUnavailable int) map[string]bool {
	out := 0
	var cands []nodeState
	chosen := map[string]bool{}
	for _, n := range nodes {
		if !n.wanted {
			continue
		}
		if n.unavailable() {
			out++
		}
		if !n.stale(p) || n.updating() || !n.slurm.known {
			continue
		}
		if n.unavailable() {
			chosen[n.slurmName] = true // out of service already: replacing it costs nothing
			continue
		}
		if s := n.slurm.node.State; n.slurm.found && s.Drain() && !s.Busy() {
			chosen[n.slurmName] = true // already out of Slurm's service
			continue
		}
		cands = append(cands, n)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		bi, bj := cands[i].slurm.node.State.Busy(), cands[j].slurm.node.State.Busy()
		if bi != bj {
			return !bi
		}
		return cands[i].slurmName < cands[j].slurmName
	})
	for _, n := range cands {
		if out >= maxUnavailable {
			break
		}
		chosen[n.slurmName] = true
		out++
	}
	return chosen
}
