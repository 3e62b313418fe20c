package nodeset

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmrest"
)

var t0 = time.Unix(1_800_000_000, 0)

func pod(hash string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{keys.LabelTemplateHash: hash}, CreationTimestamp: metav1.NewTime(t0)},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func slurmNode(reason string, started time.Time, state ...string) slurmView {
	return slurmView{known: true, found: true, node: slurmrest.Node{Name: "n", State: state, Reason: reason, SlurmdStarted: started, ReasonChanged: t0}}
}

// failed is a slurmd pod the kubelet evicted.
func failed(hash string) *corev1.Pod {
	p := pod(hash, false)
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
	return p
}

// rec is the NodeSet's record of a drain it made as Slurm shows it (at t0).
func rec(reason string) drain.Record { return drain.Record{Reason: reason, At: t0} }

func TestPlanNode(t *testing.T) {
	p := params{hash: "new", leftReason: drain.LeftReason("h100")}
	unknown := slurmView{}
	absent := slurmView{known: true}
	idle := slurmNode("", t0, "IDLE")
	busy := slurmNode("", t0, "ALLOCATED")
	for _, tc := range []struct {
		name   string
		n      nodeState
		update bool
		want   action
		reason string
	}{
		{"selected node without a pod: create", nodeState{wanted: true, slurm: unknown}, false, actCreate, ""},
		{"create even while Slurm is unknown", nodeState{wanted: true, slurm: unknown}, false, actCreate, ""},
		{"old pod still terminating: wait", nodeState{wanted: true, terminating: 1, slurm: idle}, false, actWait, ""},
		{"pod replaced for an update, its node drained for it and free: the Slurm node goes first (registered afresh)",
			nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actDeleteSlurmNode, ""},
		{"pod replaced for an update, Slurm appended its own words: the same",
			nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, slurm: slurmNode(drain.ReasonNodeSetUpdate+" : Not responding", t0, "DOWN", "DRAIN")}, false, actDeleteSlurmNode, ""},
		{"no pod, an admin's drain in the update's words (no record): create, the record stays",
			nodeState{wanted: true, slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actCreate, ""},
		{"no pod, node gone from Slurm after its update: create",
			nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, slurm: absent}, false, actCreate, ""},
		{"current pod, idle node: nothing", nodeState{wanted: true, pod: pod("new", true), slurm: idle}, false, actNone, ""},
		{"left the set: drain first", nodeState{pod: pod("new", true), slurm: idle}, false, actDrain, drain.LeftReason("h100")},
		{"left the set, jobs run: wait", nodeState{pod: pod("new", true), slurm: slurmNode(drain.LeftReason("h100"), t0, "MIXED", "DRAIN")}, false, actWait, ""},
		{"left the set, completing: wait", nodeState{pod: pod("new", true), slurm: slurmNode(drain.LeftReason("h100"), t0, "IDLE", "DRAIN", "COMPLETING")}, false, actWait, ""},
		{"left the set, drained and free: delete pod", nodeState{pod: pod("new", true), slurm: slurmNode(drain.LeftReason("h100"), t0, "IDLE", "DRAIN")}, false, actDeletePod, ""},
		{"left the set, Slurm unknown: wait", nodeState{pod: pod("new", true), slurm: unknown}, false, actWait, ""},
		{"left the set, never registered: delete pod", nodeState{pod: pod("new", true), slurm: absent}, false, actDeletePod, ""},
		{"left the set while cordoned: the drain becomes ours", nodeState{pod: pod("new", true), slurm: slurmNode(drain.ReasonCordoned, t0, "IDLE", "DRAIN")}, false, actDrain, drain.LeftReason("h100")},
		{"left the set, admin drain, free: pod goes, drain kept", nodeState{pod: pod("new", true), slurm: slurmNode("bad PSU", t0, "IDLE", "DRAIN")}, false, actDeletePod, ""},
		{"Node gone, pod terminating, drained and free: force-delete", nodeState{terminating: 1, orphans: []*corev1.Pod{pod("new", true)}, slurm: slurmNode(drain.LeftReason("h100"), t0, "IDLE", "DRAIN")}, false, actForceDelete, ""},
		{"Node gone, pod terminating, never registered: force-delete", nodeState{terminating: 1, orphans: []*corev1.Pod{pod("new", true)}, slurm: absent}, false, actForceDelete, ""},
		{"Node gone, pod terminating, jobs run: wait", nodeState{terminating: 1, orphans: []*corev1.Pod{pod("new", true)}, slurm: slurmNode(drain.LeftReason("h100"), t0, "ALLOCATED", "DRAIN")}, false, actWait, ""},
		{"Node gone, pod terminating, not drained: wait", nodeState{terminating: 1, orphans: []*corev1.Pod{pod("new", true)}, slurm: idle}, false, actWait, ""},
		{"Node gone, pod terminating, Slurm unknown: wait", nodeState{terminating: 1, orphans: []*corev1.Pod{pod("new", true)}, slurm: unknown}, false, actWait, ""},
		{"one of two terminating pods has a Node: wait", nodeState{terminating: 2, orphans: []*corev1.Pod{pod("new", true)}, slurm: absent}, false, actWait, ""},
		{"pod gone, our record free: remove it", nodeState{slurm: slurmNode(drain.LeftReason("h100"), t0, "IDLE", "DRAIN")}, false, actDeleteSlurmNode, ""},
		{"pod gone, our record busy: keep", nodeState{slurm: slurmNode(drain.LeftReason("h100"), t0, "ALLOCATED", "DRAIN")}, false, actNone, ""},
		{"pod gone, another NodeSet's reason: keep", nodeState{slurm: slurmNode(drain.LeftReason("a100"), t0, "IDLE", "DRAIN")}, false, actNone, ""},
		// Slurm appends its own cause once the gone slurmd stops answering.
		{"pod gone, our record with Slurm's cause appended: remove it", nodeState{slurm: slurmNode(drain.LeftReason("h100")+" : Not responding", t0.Add(3*time.Minute), "IDLE", "DRAIN")}, false, actDeleteSlurmNode, ""},
		{"pod gone, another NodeSet's with Slurm's cause: keep", nodeState{slurm: slurmNode(drain.LeftReason("a100")+" : Not responding", t0, "IDLE", "DRAIN")}, false, actNone, ""},
		// The NodeSet deleted mid-update: its update drain becomes the leaving one.
		{"left the set while its update drain holds: drained for leaving", nodeState{record: rec(drain.ReasonNodeSetUpdate), pod: pod("old", true),
			slurm: slurmNode(drain.ReasonNodeSetUpdate+" : Not responding", t0.Add(3*time.Minute), "IDLE", "DRAIN")}, false, actDrain, drain.LeftReason("h100")},
		{"left the set while an admin's drain in the update's words holds: kept", nodeState{pod: pod("old", true),
			slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actDeletePod, ""},
		{"pod gone, record but Slurm unknown: nothing", nodeState{slurm: unknown}, false, actNone, ""},
		{"outdated, not chosen: nothing", nodeState{wanted: true, pod: pod("old", true), slurm: busy}, false, actNone, ""},
		{"outdated, chosen: drain for update", nodeState{wanted: true, pod: pod("old", true), slurm: busy}, true, actDrain, drain.ReasonNodeSetUpdate},
		{"update in progress, busy: wait", nodeState{wanted: true, pod: pod("old", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "ALLOCATED", "DRAIN")}, false, actWait, ""},
		{"update in progress, free: delete pod", nodeState{wanted: true, pod: pod("old", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actDeletePod, ""},
		{"update on a cordoned node keeps the cordon's reason", nodeState{wanted: true, pod: pod("old", true), slurm: slurmNode(drain.ReasonCordoned, t0, "IDLE", "DRAIN")}, true, actDeletePod, ""},
		{"new pod not Ready: wait", nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, pod: pod("new", false), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actWait, ""},
		{"new pod Ready, old slurmd still registered: wait", nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, pod: pod("new", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0.Add(-time.Hour), "IDLE", "DRAIN")}, false, actWait, ""},
		{"new pod Ready, not responding: wait", nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, pod: pod("new", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0.Add(time.Second), "IDLE", "DRAIN", "NOT_RESPONDING")}, false, actWait, ""},
		{"new pod Ready and registered: resume", nodeState{record: rec(drain.ReasonNodeSetUpdate), wanted: true, pod: pod("new", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0.Add(time.Second), "IDLE", "DRAIN")}, false, actResume, ""},
		{"selected again after leaving: resume", nodeState{record: rec(drain.LeftReason("h100")), wanted: true, pod: pod("new", true), slurm: slurmNode(drain.LeftReason("h100"), t0.Add(time.Second), "IDLE", "DRAIN")}, false, actResume, ""},
		{"the NodeSet's words without its record: an admin's, never resumed", nodeState{wanted: true, pod: pod("new", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0.Add(time.Second), "IDLE", "DRAIN")}, false, actNone, ""},
		{"record from long before the drain: an admin's, never resumed", nodeState{wanted: true, record: drain.Record{Reason: drain.ReasonNodeSetUpdate, At: t0.Add(-time.Hour)}, pod: pod("new", true), slurm: slurmNode(drain.ReasonNodeSetUpdate, t0.Add(time.Second), "IDLE", "DRAIN")}, false, actNone, ""},
		{"admin drain on a current pod: never resumed", nodeState{wanted: true, pod: pod("new", true), slurm: slurmNode("bad PSU", t0.Add(time.Second), "IDLE", "DRAIN")}, false, actNone, ""},
		{"failed pod: replaced", nodeState{wanted: true, pod: failed("new"), slurm: idle}, false, actReplaceFailed, ""},
		{"failed pod, Slurm unknown: replaced (no slurmd runs there)", nodeState{wanted: true, pod: failed("new"), slurm: unknown}, false, actReplaceFailed, ""},
		{"failed outdated pod: replaced, not drained", nodeState{wanted: true, pod: failed("old"), slurm: busy}, true, actReplaceFailed, ""},
		{"failed pod in backoff: wait", nodeState{wanted: true, pod: failed("new"), slurm: idle, failedBackoff: 4 * time.Second}, false, actWait, ""},
		{"failed pod, node left the set: drain first", nodeState{pod: failed("new"), slurm: idle}, false, actDrain, drain.LeftReason("h100")},
		{"GPU health drain: never resumed", nodeState{wanted: true, pod: pod("new", true), slurm: slurmNode(drain.ReasonGPUPrefix+"xid: 79", t0.Add(time.Second), "IDLE", "DRAIN")}, false, actNone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planNode(tc.n, p, tc.update)
			if got.act != tc.want || got.reason != tc.reason {
				t.Errorf("got %s %q (%s), want %s %q", got.act, got.reason, got.why, tc.want, tc.reason)
			}
		})
	}
}

// A registered node whose Node's FeatureLabels now give other features
// has them set in Slurm: no drain, no new pod.
func TestPlanNodeFeatureLabelChanged(t *testing.T) {
	spec := v1alpha1.SlurmNodeSpec{Features: []string{"h100"}, FeatureLabels: []string{"gpu"}}
	p := params{hash: "new", leftReason: drain.LeftReason("h100"), slurm: spec}
	node := func(v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"gpu": v}}}
	}
	idle := slurmNode("", t0, "IDLE")
	idle.node.Features = []string{"h100", "H100-SXM"}
	current := pod("new", true)
	assert.Equal(t, actNone, planNode(nodeState{wanted: true, pod: current, node: node("H100-SXM"), slurm: idle}, p, false).act)
	changed := nodeState{wanted: true, pod: current, node: node("H200"), slurm: idle}
	assert.False(t, changed.outdated(p), "no new pod for a label")
	s := planNode(changed, p, false)
	assert.Equal(t, actSetFeatures, s.act)
	assert.Equal(t, []string{"h100", "H200"}, s.features)
	before := idle
	before.node.SlurmdStarted = t0.Add(-time.Minute) // slurmd of an older pod
	assert.Equal(t, actNone, planNode(nodeState{wanted: true, pod: current, node: node("H200"), slurm: before}, p, false).act,
		"not before the pod's slurmd registered: it registers with the features of its creation")
	assert.Equal(t, actNone, planNode(nodeState{wanted: true, pod: current, node: node("H200"), slurm: slurmView{}}, p, false).act,
		"nothing while Slurm's state is unknown")
}

func TestPlanNodeOnDeleteKeepsOutdatedPods(t *testing.T) {
	p := params{hash: "new", onDelete: true}
	n := nodeState{wanted: true, pod: pod("old", true), slurm: slurmNode("", t0, "IDLE")}
	if got := planNode(n, p, true); got.act != actNone {
		t.Fatalf("OnDelete: got %s, want none", got.act)
	}
	if got := planUpdates([]nodeState{n}, p, 5); len(got) != 0 {
		t.Fatalf("OnDelete: chose %v", got)
	}
}

func TestPlanUpdates(t *testing.T) {
	p := params{hash: "new"}
	node := func(name, hash string, ready bool, sv slurmView) nodeState {
		return nodeState{slurmName: name, wanted: true, pod: pod(hash, ready), slurm: sv}
	}
	idle := slurmNode("", t0, "IDLE")
	busy := slurmNode("", t0, "ALLOCATED")
	updating := slurmNode(drain.ReasonNodeSetUpdate, t0, "ALLOCATED", "DRAIN")
	for _, tc := range []struct {
		name  string
		nodes []nodeState
		max   int
		want  []string
	}{
		{"idle nodes before busy ones", []nodeState{node("a", "old", true, busy), node("b", "old", true, idle), node("c", "old", true, idle)}, 1, []string{"b"}},
		{"up to maxUnavailable", []nodeState{node("a", "old", true, busy), node("b", "old", true, idle), node("c", "old", true, idle)}, 2, []string{"b", "c"}},
		{"one in progress fills the budget", []nodeState{node("a", "old", true, updating), node("b", "old", true, idle)}, 1, nil},
		{"a not-Ready pod fills the budget", []nodeState{node("a", "new", false, idle), node("b", "old", true, idle)}, 1, nil},
		{"a new Ready pod whose slurmd has not registered yet fills the budget (its record went with the update)",
			[]nodeState{node("a", "new", true, slurmView{known: true}), node("b", "old", true, idle)}, 1, nil},
		{"an outdated not-Ready pod is replaced at once", []nodeState{node("a", "old", false, idle), node("b", "old", true, idle)}, 1, []string{"a"}},
		{"admin-drained idle node: replaced without budget", []nodeState{node("a", "old", true, slurmNode("bad PSU", t0, "IDLE", "DRAIN")), node("b", "old", true, idle)}, 1, []string{"a", "b"}},
		{"Slurm unknown: nothing starts", []nodeState{node("a", "old", true, slurmView{})}, 3, nil},
		{"all current: nothing", []nodeState{node("a", "new", true, idle)}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planUpdates(tc.nodes, p, tc.max)
			if len(got) != len(tc.want) {
				t.Fatalf("chose %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Fatalf("chose %v, want %v", got, tc.want)
				}
			}
		})
	}
}
