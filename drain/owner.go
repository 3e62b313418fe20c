package drain

import (
	"strings"
	"time"

	"github.com/onepool/onepool/keys"
)

// Writer is who made a drain: one of onepool's three writers, Admin for
// anyone else (an admin, a script, Slurm itself), None for no drain.
type Writer int

const (
	None Writer = iota
	Admin
	Syncer
	NodeSet
	Agent
)

func (w Writer) String() string {
	return [...]string{"none", "admin", "syncer", "nodeset", "agent"}[w]
}

// Onepool says whether the writer is a part of onepool.
func (w Writer) Onepool() bool { return w >= Syncer }

// Form says whose form a drain reason has: the syncer's (one of its three
// reasons exactly, or the cordon reason followed by ": " and the operator's
// words), the NodeSet controller's, the node agent's, or Admin for none of
// them. For the syncer and the NodeSet it is a cross-check of their
// records, never enough on its own; the agent keeps no record, and its
// form is all there is.
func Form(reason string) Writer {
	switch {
	case reason == ReasonCordoned || strings.HasPrefix(reason, ReasonCordoned+operatorReasonJoin) ||
		reason == ReasonPodDeleted || reason == ReasonPodNotReady:
		return Syncer
	case reason == ReasonNodeSetUpdate || strings.HasPrefix(reason, ReasonNodeSetLeft+" ") || strings.HasPrefix(reason, ReasonMIGConfig+" "):
		return NodeSet
	case strings.HasPrefix(reason, ReasonGPUPrefix):
		return Agent
	}
	return Admin
}

// Records are onepool's records of its drains on one node: the syncer's
// (the drain in place, the one it replaced, the one it resumed last; see
// keys.AnnotationDrainApplied) and the NodeSet controller's
// (keys.AnnotationNodeSetDrain). A writer that reads only its own leaves
// the other out.
type Records struct {
	Syncer  []Record
	NodeSet Record
}

// Owner says who owns the drain Slurm shows (drained, its reason, when the
// reason was set; zero when Slurm gave no time), and the record that makes
// it theirs:
//   - None: Slurm shows no drain;
//   - Syncer, NodeSet: one of the writer's records, of its form, Matches
//     Slurm's drain (the first of the syncer's that does);
//   - Agent: the reason has the agent's form (no record);
//   - Admin: anything else, an admin's drain in onepool's words included.
func (rs Records) Owner(drained bool, reason string, changed time.Time) (Writer, Record) {
	if !drained {
		return None, Record{}
	}
	for _, r := range rs.Syncer {
		if Form(r.Reason) == Syncer && r.Matches(drained, reason, changed) {
			return Syncer, r
		}
	}
	if Form(rs.NodeSet.Reason) == NodeSet && rs.NodeSet.Matches(drained, reason, changed) {
		return NodeSet, rs.NodeSet
	}
	if Form(reason) == Agent {
		return Agent, Record{}
	}
	return Admin, Record{}
}

// RecordsIn reads onepool's records of its drains from a Node's
// annotations: the syncer's (SyncerRecords) and the NodeSet controller's.
func RecordsIn(a map[string]string) Records {
	inPlace, replaced, resumed := SyncerRecords(a)
	return Records{Syncer: []Record{inPlace, replaced, resumed},
		NodeSet: Read(a, keys.AnnotationNodeSetDrain, keys.AnnotationNodeSetDrainAt)}
}

// SyncerRecords reads the syncer's records from annotations (a Node's, or
// a slurmd pod's): the drain in place, the one it replaced, the one it
// resumed last.
func SyncerRecords(a map[string]string) (inPlace, replaced, resumed Record) {
	return Read(a, keys.AnnotationDrainApplied, keys.AnnotationDrainAppliedAt),
		Parse(a[keys.AnnotationDrainReplaced]), Parse(a[keys.AnnotationDrainResumed])
}
