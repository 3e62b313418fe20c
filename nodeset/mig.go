package nodeset

import (
	"cmp"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
)

// A Node's MIG layout changes only while its Slurm node runs nothing and
// no slurmd pod holds its GPUs (issue 41): the Node asks a layout by
// keys.LabelMIGConfig; the NodeSet drains the node (like a rolling update,
// within maxUnavailable), deletes its pod once no job runs there, hands
// the layout to NVIDIA's mig-manager (keys.LabelNVIDIAMIGConfig), and makes
// the new pod once mig-manager says it applied it. The new pod's slurmd
// registers the node afresh: the node agent reads the new MIG devices.

// migLayout is a Node's MIG layout: the one asked, the one handed to
// mig-manager, and mig-manager's state of it.
type migLayout struct {
	want, applied, state string
}

func migOf(node *corev1.Node) migLayout {
	if node == nil {
		return migLayout{}
	}
	return migLayout{
		want:    node.Labels[keys.LabelMIGConfig],
		applied: node.Labels[keys.LabelNVIDIAMIGConfig],
		state:   node.Labels[keys.LabelNVIDIAMIGConfigState],
	}
}

// reconfigure says the node's slurmd pod must go for another MIG layout.
// Only a change of the layout asked does it: mig-manager's state moving
// (it applies its layout again when it restarts) takes no pod away.
func (n nodeState) reconfigure() bool {
	m := migOf(n.node)
	return n.pod != nil && m.want != "" && m.want != m.applied
}

// migBeforeCreate decides a node without a slurmd pod whose Node asks a
// MIG layout not applied yet: drain it if Slurm has it in service, hand the
// layout over once it runs nothing, then wait for mig-manager's success.
// ok is false when the pod may be made (no layout asked, or applied).
func migBeforeCreate(n nodeState) (st step, ok bool) {
	m := migOf(n.node)
	s := n.slurm
	switch {
	case m.want == "":
		return step{}, false
	case m.want != m.applied:
		switch {
		case !s.known:
			return step{act: actWait, why: "Slurm's state is unknown"}, true
		case s.found && !s.node.State.Drain():
			return step{act: actDrain, reason: drain.MIGConfigReason(m.want)}, true
		case s.found && s.node.State.Busy():
			return step{act: actWait, why: "jobs still run on the Slurm node", busy: true, since: s.node.ReasonChanged}, true
		}
		return step{act: actSetMIGConfig, layout: m.want}, true
	case m.state == keys.MIGConfigSuccess:
		return step{}, false
	case m.state == keys.MIGConfigFailed:
		return step{act: actWait, layout: m.want, migFailed: true,
			why: fmt.Sprintf("NVIDIA's mig-manager failed to apply MIG layout %s (%s=%s)", m.want, keys.LabelNVIDIAMIGConfigState, m.state)}, true
	}
	return step{act: actWait, layout: m.want,
		why: fmt.Sprintf("NVIDIA's mig-manager applies MIG layout %s (%s=%s)", m.want, keys.LabelNVIDIAMIGConfigState, cmp.Or(m.state, "unset"))}, true
}
