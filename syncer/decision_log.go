package syncer

import (
	"time"

	"github.com/go-logr/logr"
)

// logDecision writes what plan saw and decided, for whoever must find why
// a drain stayed or went: at V(1) when the decision changes something or
// leaves a drain onepool does not own in place, at V(2) otherwise (every
// resync of every node).
func logDecision(log logr.Logger, slurmName string, o observed, d decision) {
	level := 2
	if d.action != actNone || d.record != nil || d.keptAdmin || (o.slurm.State.Drain() && !d.owner.Onepool()) {
		level = 1
	}
	l := log.V(level)
	if !l.Enabled() {
		return
	}
	want, _, _ := o.cause()
	kv := []any{"slurmNode", slurmName, "action", actionName(d.action), "cause", want, "owner", d.owner.String(),
		"slurmState", o.slurm.State, "slurmReason", o.slurm.Reason, "slurmReasonAt", timeText(o.slurm.ReasonChanged),
		"record", recordText(o.record), "nodeSetRecord", o.nodeSetRec.Text(),
		"podGone", o.podGone, "podReady", o.podReady, "cordoned", o.cordoned, "nodeMissing", o.nodeMissing}
	if d.record != nil {
		kv = append(kv, "newRecord", recordText(*d.record))
	}
	l.Info("decided", kv...)
}

func actionName(a slurmAction) string {
	return [...]string{"none", "drain", "resume"}[a]
}

// recordText is the syncer's three records in one line.
func recordText(r drainRecord) string {
	return "inPlace=" + r.Record.Text() + "; replaced=" + r.replaced.Text() + "; resumed=" + r.resumed.Text()
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
