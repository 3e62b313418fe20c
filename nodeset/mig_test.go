package nodeset

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
)

// migNode is a Node asking MIG layout want, with applied handed to
// mig-manager and its state ("" for no label).
func migNode(want, applied, state string) *corev1.Node {
	l := map[string]string{}
	for k, v := range map[string]string{keys.LabelMIGConfig: want, keys.LabelNVIDIAMIGConfig: applied, keys.LabelNVIDIAMIGConfigState: state} {
		if v != "" {
			l[k] = v
		}
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: l}}
}

// A Node asking another MIG layout has its slurmd pod replaced like a
// rolling update (drained, the pod deleted once free), then the layout is
// handed to mig-manager only while the node runs nothing and has no pod,
// and the new pod is made on mig-manager's success.
func TestPlanNodeMIGLayout(t *testing.T) {
	p := params{hash: "new", leftReason: drain.LeftReason("h100")}
	reason := drain.MIGConfigReason("all-1g.10gb")
	asks := migNode("all-1g.10gb", "all-disabled", keys.MIGConfigSuccess)
	handed := migNode("all-1g.10gb", "all-1g.10gb", keys.MIGConfigPending)
	applied := migNode("all-1g.10gb", "all-1g.10gb", keys.MIGConfigSuccess)
	failedLayout := migNode("all-1g.10gb", "all-1g.10gb", keys.MIGConfigFailed)
	idle := slurmNode("", t0, "IDLE")
	drained := slurmNode(reason, t0, "IDLE", "DRAIN")
	for _, tc := range []struct {
		name   string
		n      nodeState
		update bool
		want   action
		reason string
		layout string
	}{
		{"asks another layout, not chosen yet: nothing", nodeState{wanted: true, node: asks, pod: pod("new", true), slurm: idle}, false, actNone, "", ""},
		{"asks another layout, chosen: drained for it", nodeState{wanted: true, node: asks, pod: pod("new", true), slurm: idle}, true, actDrain, reason, ""},
		{"drained for it, jobs run: wait", nodeState{wanted: true, node: asks, record: rec(reason), pod: pod("new", true), slurm: slurmNode(reason, t0, "MIXED", "DRAIN")}, false, actWait, "", ""},
		{"drained for it, free: the pod goes", nodeState{wanted: true, node: asks, record: rec(reason), pod: pod("new", true), slurm: drained}, false, actDeletePod, "", ""},
		{"chosen while a rolling update's drain holds: the pod goes on it", nodeState{wanted: true, node: asks, record: rec(drain.ReasonNodeSetUpdate), pod: pod("old", true),
			slurm: slurmNode(drain.ReasonNodeSetUpdate, t0, "IDLE", "DRAIN")}, false, actDeletePod, "", ""},
		{"old pod terminating: wait", nodeState{wanted: true, node: asks, record: rec(reason), terminating: 1, slurm: drained}, false, actWait, "", ""},
		{"pod gone, free: the layout is handed over", nodeState{wanted: true, node: asks, record: rec(reason), slurm: drained}, false, actSetMIGConfig, "", "all-1g.10gb"},
		{"pod gone, Slurm unknown: wait", nodeState{wanted: true, node: asks, record: rec(reason), slurm: slurmView{}}, false, actWait, "", ""},
		{"pod gone (deleted by hand), node in service: drained first", nodeState{wanted: true, node: asks, slurm: idle}, false, actDrain, reason, ""},
		{"pod gone, jobs still run: wait", nodeState{wanted: true, node: asks, record: rec(reason), slurm: slurmNode(reason, t0, "ALLOCATED", "DRAIN")}, false, actWait, "", ""},
		{"a new Node never registered: handed over before its first pod", nodeState{wanted: true, node: asks, slurm: slurmView{known: true}}, false, actSetMIGConfig, "", "all-1g.10gb"},
		{"handed over, mig-manager pending: wait", nodeState{wanted: true, node: handed, record: rec(reason), slurm: drained}, false, actWait, "", "all-1g.10gb"},
		{"handed over, mig-manager has not answered: wait", nodeState{wanted: true, node: migNode("all-1g.10gb", "all-1g.10gb", ""), record: rec(reason), slurm: drained}, false, actWait, "", "all-1g.10gb"},
		{"mig-manager failed: wait, no pod", nodeState{wanted: true, node: failedLayout, record: rec(reason), slurm: drained}, false, actWait, "", "all-1g.10gb"},
		{"applied: the Slurm node goes first (registered afresh with the new MIG devices)", nodeState{wanted: true, node: applied, record: rec(reason), slurm: drained}, false, actDeleteSlurmNode, "", ""},
		{"applied, Slurm's cause appended: the same", nodeState{wanted: true, node: applied, record: rec(reason), slurm: slurmNode(reason+" : Not responding", t0, "DOWN", "DRAIN")}, false, actDeleteSlurmNode, "", ""},
		{"applied, record gone: the new pod", nodeState{wanted: true, node: applied, record: rec(reason), slurm: slurmView{known: true}}, false, actCreate, "", ""},
		{"applied, an admin's drain in the same words (no record): the new pod, the record stays", nodeState{wanted: true, node: applied, slurm: drained}, false, actCreate, "", ""},
		{"new pod Ready and registered: resumed", nodeState{wanted: true, node: applied, record: rec(reason), pod: pod("new", true), slurm: slurmNode(reason, t0.Add(time.Second), "IDLE", "DRAIN")}, false, actResume, "", ""},
		{"layout applied, mig-manager applies it again (pending): the pod stays", nodeState{wanted: true, node: handed, pod: pod("new", true), slurm: idle}, true, actNone, "", ""},
		{"no layout asked: nothing of MIG", nodeState{wanted: true, node: migNode("", "all-balanced", keys.MIGConfigPending), pod: pod("new", true), slurm: idle}, true, actNone, "", ""},
		{"no layout asked, no pod: the pod (mig-manager's own layout is not onepool's)", nodeState{wanted: true, node: migNode("", "all-balanced", keys.MIGConfigFailed), slurm: slurmView{known: true}}, false, actCreate, "", ""},
		{"the Node leaves while it asks a layout: drained for leaving", nodeState{node: asks, pod: pod("new", true), slurm: idle}, false, actDrain, drain.LeftReason("h100"), ""},
		{"the layout asked again while mig-manager failed: handed over again", nodeState{wanted: true, node: migNode("all-balanced", "all-1g.10gb", keys.MIGConfigFailed), record: rec(reason), slurm: drained}, false, actSetMIGConfig, "", "all-balanced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planNode(tc.n, p, tc.update)
			assert.Equal(t, tc.want, got.act, "%s (%s)", got.act, got.why)
			assert.Equal(t, tc.reason, got.reason)
			assert.Equal(t, tc.layout, got.layout)
		})
	}
	assert.True(t, planNode(nodeState{wanted: true, node: failedLayout, record: rec(reason), slurm: drained}, p, false).migFailed)
	assert.False(t, planNode(nodeState{wanted: true, node: handed, record: rec(reason), slurm: drained}, p, false).migFailed)
}

// A layout change is chosen like a rolling update: within maxUnavailable,
// idle nodes first, and also under OnDelete (the label asks it of that Node).
func TestPlanUpdatesMIGLayout(t *testing.T) {
	asks := migNode("all-1g.10gb", "all-disabled", keys.MIGConfigSuccess)
	node := func(name string, n *corev1.Node, sv slurmView) nodeState {
		return nodeState{slurmName: name, wanted: true, node: n, pod: pod("new", true), slurm: sv}
	}
	idle := slurmNode("", t0, "IDLE")
	busy := slurmNode("", t0, "ALLOCATED")
	nodes := []nodeState{node("a", asks, busy), node("b", asks, idle), node("c", migNode("", "", ""), idle)}
	assert.Equal(t, map[string]bool{"b": true}, planUpdates(nodes, params{hash: "new"}, 1))
	assert.Equal(t, map[string]bool{"a": true, "b": true}, planUpdates(nodes, params{hash: "new"}, 3))
	assert.Equal(t, map[string]bool{"b": true}, planUpdates(nodes, params{hash: "new", onDelete: true}, 1))
	reconfiguring := node("a", asks, slurmNode(drain.MIGConfigReason("all-1g.10gb"), t0, "ALLOCATED", "DRAIN"))
	assert.Empty(t, planUpdates([]nodeState{reconfiguring, node("b", asks, idle)}, params{hash: "new"}, 1), "one in progress fills the budget")
}
