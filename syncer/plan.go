package syncer

import (
	"cmp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// slurmAction is what the syncer does to the Slurm node.
type slurmAction int

const (
	actNone slurmAction = iota
	actDrain
	actResume
)

// observed is everything one decision depends on; plan is a pure function of it.
type observed struct {
	now        time.Time
	grace      time.Duration
	cordoned   bool
	cordonText string // the Node's cordon-reason annotation
	podGone    bool   // the slurmd pod is being deleted
	podReady   bool
	// nodeMissing: the pod's Node is gone (deleted; it may register again).
	nodeMissing bool
	notReadyAt  time.Time    // when the pod's Ready condition last turned false
	record      drainRecord  // onepool's record of its drain (Node, else pod)
	nodeSetRec  drain.Record // the NodeSet controller's record of its drain (Node)
	slurm       slurmrest.Node
}

// drainRecord is the syncer's record of its drains. Slurm may show a drain
// of onepool's that onepool no longer thinks in place, and each is kept
// until it cannot come back:
//   - replaced: a drain with new words replaces onepool's own; until Slurm
//     shows the new words, the drain there is still the old one (the soak:
//     a cordon's words changed while slurmctld was down; the failed drain
//     left a record Slurm did not match, and the syncer took its own drain
//     for an admin's and never resumed it). Once Slurm shows the new words
//     the old drain stays recorded: a slurmctld restart before it saved
//     its state brings the old words back, and they are drained over again.
//   - resumed: the drain onepool resumed last. slurmctld restarted before
//     saving its state (a crash, SIGKILL) brings the drain back with its
//     old reason and time (the soak saw it: onepool's resume undone 3 s
//     later, then kept as an admin's drain for good).
//
// Both are pinned to Slurm's own reason time for the drain (drain.Record
// Pin): the very drain comes back with that time, and the same words set
// at any other time are an admin's (the soak, 2026-11-28: an admin's drain
// in the cordon's words 13 s after onepool replaced its own was taken for
// onepool's, within the unpinned record's minute, and resumed).
type drainRecord struct {
	drain.Record
	replaced drain.Record
	resumed  drain.Record
}

// all is the syncer's records, the drain in place first.
func (r drainRecord) all() []drain.Record { return []drain.Record{r.Record, r.replaced, r.resumed} }

// same says whether two records hold the same drains.
func (r drainRecord) same(o drainRecord) bool {
	return r.Record.Equal(o.Record) && r.replaced.Equal(o.replaced) && r.resumed.Equal(o.resumed)
}

// withoutInPlace is the record with no drain in place (the resumed one
// kept); nil when that is what it holds already.
func (r drainRecord) withoutInPlace() *drainRecord {
	if r.Reason == "" && r.replaced.Reason == "" {
		return nil
	}
	return &drainRecord{resumed: r.resumed}
}

// decision is what plan wants done.
type decision struct {
	action      slurmAction
	reason      string       // for actDrain
	redrain     bool         // Slurm was resumed while onepool's cause still holds
	keptAdmin   bool         // a cause holds but an admin's drain is in place: left alone
	cordonNote  string       // what was changed in the operator's cordon words ("" nothing)
	record      *drainRecord // to write before acting (nil: leave the record as it is)
	mirror      map[string]string
	condition   corev1.NodeCondition
	recheckIn   time.Duration // come back then (not-ready grace running out)
	releasePod  bool          // the finalizer may go: Slurm will not place jobs there
	unavailable bool
	owner       drain.Writer // who owns the drain Slurm shows (None: no drain)
}

// cause returns onepool's drain reason while a Kubernetes-side cause holds,
// and what was changed in the operator's cordon words.
func (o observed) cause() (reason, cordonNote string, recheck time.Duration) {
	switch {
	case o.podGone:
		return drain.ReasonPodDeleted, "", 0
	case o.cordoned:
		r, note := drain.CordonReason(o.cordonText)
		return r, note, 0
	case !o.podReady && !o.notReadyAt.IsZero():
		if waited := o.now.Sub(o.notReadyAt); waited < o.grace {
			return "", "", o.grace - waited
		}
		return drain.ReasonPodNotReady, "", 0
	}
	return "", "", 0
}

// plan decides, from a known Slurm state, what to do on both sides. Callers
// never call it with an unknown Slurm state: unknown means no action.
func plan(o observed) decision {
	d := decision{}
	want, note, recheck := o.cause()
	d.cordonNote, d.recheckIn = note, recheck
	st := o.slurm.State
	drained := st.Drain()
	// Who owns Slurm's drain: the syncer and the NodeSet controller by
	// their records, the node agent's GPU health drains by their reason
	// (an admin resumes them). Any other drain is an admin's.
	owner, current := drain.Records{Syncer: o.record.all(), NodeSet: o.nodeSetRec}.Owner(drained, o.slurm.Reason, o.slurm.ReasonChanged)
	ours := owner == drain.Syncer
	d.owner = owner
	fresh := drain.Record{Reason: want, At: o.now}

	switch {
	case want != "" && !drained:
		d.action, d.reason = actDrain, want
		d.redrain = o.record.Reason != ""
		d.record = &drainRecord{Record: fresh, resumed: o.record.resumed}
	case want != "" && ours && !drain.Shows(o.slurm.Reason, want):
		// Our drain, another cause now (cordoned, then the pod deleted).
		// The drain in place stays recorded until Slurm shows the new one,
		// pinned to Slurm's time for it: those words set later are not it.
		d.action, d.reason = actDrain, want
		d.record = &drainRecord{Record: fresh, replaced: current.Pin(o.slurm.Reason, o.slurm.ReasonChanged), resumed: o.record.resumed}
	case want != "" && ours:
		// Slurm shows one of those recorded: that one is in place.
		next := drainRecord{Record: current, resumed: o.record.resumed}
		if current.Equal(o.record.Record) {
			// The new words are in place; the drain they replaced stays
			// recorded, as a resumed one does: slurmctld restarted before
			// saving its state brings the old words back (the soak,
			// 2026-11-26: cordon words changed, slurmctld SIGKILLed, the
			// old words back and kept as an admin's drain for good).
			next.replaced = o.record.replaced
		}
		if !o.record.same(next) {
			d.record = &next
		}
	case want != "" && drained:
		// An admin's drain already keeps Slurm off the node; theirs stays,
		// and onepool has no drain in place.
		d.keptAdmin = true
		d.record = o.record.withoutInPlace()
	case want == "" && ours && o.nodeMissing:
		// The Node was deleted: its cordon is gone with it, but the
		// machine may be leaving. onepool's drain and its record stay
		// until the Node is back (or the pod goes).
	case want == "" && ours:
		d.action = actResume
		d.record = &drainRecord{resumed: current.Pin(o.slurm.Reason, o.slurm.ReasonChanged)}
	default:
		// No cause and no drain of onepool's: none in place.
		d.record = o.record.withoutInPlace()
	}
	d.releasePod = o.podGone && (drained || d.action == actDrain)
	d.mirror, d.condition, d.unavailable = mirror(o.slurm, d.action, owner.Onepool())
	return d
}

// mirror is Slurm's view for the Kubernetes side: annotations while Slurm
// holds the node out for a cause onepool did not make, and the condition.
// onepools says the node's drain (if any) is onepool's own.
func mirror(n slurmrest.Node, act slurmAction, onepools bool) (map[string]string, corev1.NodeCondition, bool) {
	st := n.State
	cond := corev1.NodeCondition{Type: keys.ConditionSlurmUnavailable, Status: corev1.ConditionFalse, Reason: keys.ConditionReasonAvailable,
		Message: "Slurm may place jobs on this node"}
	ours := st.Drain() && onepools
	var foreign bool
	switch {
	case act == actDrain, ours && act != actResume:
		cond.Status, cond.Reason, cond.Message = corev1.ConditionTrue, keys.ConditionReasonDrainedByOwner, "drained by onepool"
		if ours {
			cond.Message = n.Reason
		}
	case st.Base() == slurmrest.NodeDown:
		cond.Status, cond.Reason, cond.Message, foreign = corev1.ConditionTrue, keys.ConditionReasonDown, cmp.Or(n.Reason, "Slurm node is DOWN"), true
	case st.Has("NOT_RESPONDING"):
		cond.Status, cond.Reason, cond.Message, foreign = corev1.ConditionTrue, keys.ConditionReasonNotResponding, "slurmd does not answer slurmctld", true
	case st.Drain() && act != actResume:
		cond.Status, cond.Reason, cond.Message, foreign = corev1.ConditionTrue, keys.ConditionReasonDrained, cmp.Or(n.Reason, "drained in Slurm"), true
	}
	if !foreign {
		return nil, cond, cond.Status == corev1.ConditionTrue
	}
	ann := map[string]string{
		keys.AnnotationSlurmReason: n.Reason,
		keys.AnnotationSlurmState:  strings.Join(st, "+"),
	}
	if !n.ReasonChanged.IsZero() {
		ann[keys.AnnotationSlurmSince] = n.ReasonChanged.UTC().Format(time.RFC3339)
	}
	if n.ReasonSetByUser != "" {
		ann[keys.AnnotationSlurmBy] = n.ReasonSetByUser
	}
	return ann, cond, true
}
