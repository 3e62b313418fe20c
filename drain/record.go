package drain

import (
	"encoding/json"
	"strings"
	"time"
)

// Record is what a part of onepool writes down just before it drains a
// Slurm node: the reason and when. A drain is that part's own only when
// Slurm shows the recorded reason, set within RecordSlack of the record.
type Record struct {
	Reason string
	At     time.Time
	// Exact: At is Slurm's own reason time for the drain, read from Slurm
	// (Pin), and the drain is this one only at that very second. Without
	// it At is onepool's clock when it wrote the record, and Slurm's time
	// may be up to RecordSlack away.
	Exact bool
}

// exactMark starts a record's time when it is Slurm's own (Exact), in
// annotations and Text: "slurm@2026-11-28T02:19:04Z".
const exactMark = "slurm@"

// RecordSlack is how far apart the record's time and Slurm's reason time
// may be and still be one drain: the clocks of two hosts, plus the drain
// request that follows the record.
const RecordSlack = time.Minute

// Matches says whether Slurm's drain (drained, its reason, when the reason
// was set; zero when Slurm gave no time) is the recorded one. A record
// without a time matches nothing.
//
// Slurm appends its own cause to a drain's reason when it sets the node
// down ("<reason> : Not responding", a slurmd that stopped answering, as
// on a cordoned node being rebooted) and moves the reason time: that is
// still the recorded drain (SlurmAppended).
func (r Record) Matches(drained bool, reason string, changed time.Time) bool {
	if r.Reason == "" || r.At.IsZero() || !drained {
		return false
	}
	switch {
	case reason == r.Reason:
		if changed.IsZero() {
			return true
		}
		if r.Exact {
			return changed.Truncate(time.Second).Equal(r.At)
		}
		d := changed.Sub(r.At)
		return d <= RecordSlack && d >= -RecordSlack
	case SlurmAppended(reason, r.Reason):
		return changed.IsZero() || changed.After(r.At.Add(-RecordSlack))
	}
	return false
}

// Pin is the record with Slurm's own time for it, when Slurm shows its very
// words (reason) set at changed: the drain onepool replaces or resumes is
// then that one drain, and the same words set at any other time (an
// admin's, seconds later) are not onepool's. The soak found it: onepool
// replaced its cordon drain with "slurmd pod deleted", an admin drained
// with the cordon's words 13 s later, and the replaced record, matched
// within RecordSlack, took the admin's drain for onepool's and resumed it.
// A record Slurm does not show as it is (other words, Slurm's cause
// appended, no time) stays as it is.
func (r Record) Pin(reason string, changed time.Time) Record {
	if r.Reason == "" || reason != r.Reason || changed.IsZero() {
		return r
	}
	return Record{Reason: r.Reason, At: changed.Truncate(time.Second).UTC(), Exact: true}
}

// Equal says whether two records hold the same drain.
func (r Record) Equal(o Record) bool {
	return r.Reason == o.Reason && r.At.Equal(o.At) && r.Exact == o.Exact
}

// formatAt and parseAt write and read a record's time: RFC 3339, after
// exactMark when it is Slurm's own.
func (r Record) formatAt() string {
	at := r.At.UTC().Format(time.RFC3339)
	if r.Exact {
		return exactMark + at
	}
	return at
}

func parseAt(s string) (at time.Time, exact bool, err error) {
	s, exact = strings.CutPrefix(s, exactMark)
	at, err = time.Parse(time.RFC3339, s)
	return at, exact, err
}

// SlurmAppended says reason is base with Slurm's own cause appended (Slurm
// joins them with " : " when it sets a drained node down).
func SlurmAppended(reason, base string) bool {
	return base != "" && strings.HasPrefix(reason, base+" : ")
}

// Shows says whether Slurm's reason text is the written reason: the same
// words, or those words with Slurm's own cause appended.
func Shows(reason, written string) bool {
	return reason == written || SlurmAppended(reason, written)
}

// Read reads a record from annotations; a time that does not parse leaves
// At zero.
func Read(a map[string]string, reasonKey, atKey string) Record {
	at, exact, err := parseAt(a[atKey])
	if err != nil {
		return Record{Reason: a[reasonKey]}
	}
	return Record{Reason: a[reasonKey], At: at, Exact: exact}
}

// Text is the record in one annotation value, "<RFC 3339 time> <reason>",
// the time after exactMark when it is Slurm's own ("" for none).
func (r Record) Text() string {
	if r.Reason == "" {
		return ""
	}
	return r.formatAt() + " " + r.Reason
}

// Parse reads a record Text wrote. A value without a time that parses gives
// a record without a time, which matches no drain.
func Parse(s string) Record {
	at, reason, ok := strings.Cut(s, " ")
	if !ok {
		return Record{Reason: s}
	}
	t, exact, err := parseAt(at)
	if err != nil {
		return Record{Reason: s}
	}
	return Record{Reason: reason, At: t, Exact: exact}
}

// Annotations returns the record as annotation values ("" for none).
func (r Record) Annotations(reasonKey, atKey string) map[string]string {
	if r.Reason == "" {
		return map[string]string{reasonKey: "", atKey: ""}
	}
	return map[string]string{reasonKey: r.Reason, atKey: r.formatAt()}
}

// MergePatch is the JSON merge patch that writes the record into an
// object's annotations, or removes it when the record is empty.
func (r Record) MergePatch(reasonKey, atKey string) []byte {
	ann := map[string]any{}
	for k, v := range r.Annotations(reasonKey, atKey) {
		if v == "" {
			ann[k] = nil
		} else {
			ann[k] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}}) // strings only: cannot fail
	return b
}
