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
}

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
		d := changed.Sub(r.At)
		return d <= RecordSlack && d >= -RecordSlack
	case SlurmAppended(reason, r.Reason):
		return changed.IsZero() || changed.After(r.At.Add(-RecordSlack))
	}
	return false
}

// Equal says whether two records hold the same drain.
func (r Record) Equal(o Record) bool { return r.Reason == o.Reason && r.At.Equal(o.At) }

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
	at, _ := time.Parse(time.RFC3339, a[atKey])
	return Record{Reason: a[reasonKey], At: at}
}

// Text is the record in one annotation value, "<RFC 3339 time> <reason>"
// ("" for none).
func (r Record) Text() string {
	if r.Reason == "" {
		return ""
	}
	return r.At.UTC().Format(time.RFC3339) + " " + r.Reason
}

// Parse reads a record Text wrote. A value without a time that parses gives
// a record without a time, which matches no drain.
func Parse(s string) Record {
	at, reason, ok := strings.Cut(s, " ")
	if !ok {
		return Record{Reason: s}
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return Record{Reason: s}
	}
	return Record{Reason: reason, At: t}
}

// Annotations returns the record as annotation values ("" for none).
func (r Record) Annotations(reasonKey, atKey string) map[string]string {
	if r.Reason == "" {
		return map[string]string{reasonKey: "", atKey: ""}
	}
	return map[string]string{reasonKey: r.Reason, atKey: r.At.UTC().Format(time.RFC3339)}
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
