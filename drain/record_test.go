package drain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRecord(t *testing.T) {
	at := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	r := Record{Reason: ReasonCordoned, At: at}
	assert.JSONEq(t, `{"metadata":{"annotations":{"r":"onepool: node cordoned","t":"2026-11-24T01:00:00Z"}}}`, string(r.MergePatch("r", "t")))
	assert.JSONEq(t, `{"metadata":{"annotations":{"r":null,"t":null}}}`, string(Record{}.MergePatch("r", "t")))
	assert.Equal(t, r, Read(r.Annotations("r", "t"), "r", "t"))
	assert.Equal(t, Record{Reason: ReasonCordoned}, Read(map[string]string{"r": ReasonCordoned, "t": "yesterday"}, "r", "t"), "a time that does not parse")
	for _, tc := range []struct {
		name    string
		drained bool
		reason  string
		changed time.Time
		want    bool
	}{
		{"same drain", true, ReasonCordoned, at.Add(time.Second), true},
		{"no time from Slurm", true, ReasonCordoned, time.Time{}, true},
		{"not drained", false, ReasonCordoned, at, false},
		{"other words", true, "bad ECC", at, false},
		{"set much later", true, ReasonCordoned, at.Add(10 * time.Minute), false},
		{"set much earlier", true, ReasonCordoned, at.Add(-10 * time.Minute), false},
		{"Slurm's cause appended, time moved on", true, ReasonCordoned + " : Not responding", at.Add(time.Hour), true},
		{"Slurm's cause appended before the record", true, ReasonCordoned + " : Not responding", at.Add(-10 * time.Minute), false},
	} {
		assert.Equal(t, tc.want, r.Matches(tc.drained, tc.reason, tc.changed), tc.name)
	}
	assert.False(t, Record{Reason: ReasonCordoned}.Matches(true, ReasonCordoned, at), "a record without a time")
	assert.True(t, r.Equal(Record{Reason: ReasonCordoned, At: at.In(time.FixedZone("x", 3600))}))
	assert.False(t, r.Equal(Record{Reason: ReasonCordoned, At: at.Add(time.Second)}))
}

// TestRecordPinned: a record pinned to Slurm's own time for the drain is
// that drain at that second only; the same words seconds later are
// someone else's.
func TestRecordPinned(t *testing.T) {
	at := time.Date(2026, 11, 28, 2, 19, 4, 0, time.UTC)
	r := Record{Reason: ReasonCordoned, At: at.Add(-2 * time.Second)}
	slurmAt := at.Add(500 * time.Millisecond)
	p := r.Pin(ReasonCordoned, slurmAt)
	assert.Equal(t, Record{Reason: ReasonCordoned, At: at, Exact: true}, p)
	assert.False(t, p.Equal(Record{Reason: ReasonCordoned, At: at}), "exactness is part of the record")
	for _, tc := range []struct {
		name    string
		reason  string
		changed time.Time
		want    bool
	}{
		{"Slurm's very time", ReasonCordoned, slurmAt, true},
		{"no time from Slurm", ReasonCordoned, time.Time{}, true},
		{"the same words 39 s later", ReasonCordoned, at.Add(39 * time.Second), false},
		{"the same words a second earlier", ReasonCordoned, at.Add(-time.Second), false},
		{"Slurm's cause appended later", ReasonCordoned + " : Not responding", at.Add(time.Hour), true},
		{"other words", ReasonPodDeleted, at, false},
	} {
		assert.Equal(t, tc.want, p.Matches(true, tc.reason, tc.changed), tc.name)
	}
	assert.True(t, r.Matches(true, ReasonCordoned, at.Add(39*time.Second)), "unpinned, the minute's slack holds")

	// Pinned only to a drain Slurm shows as it is.
	assert.Equal(t, r, r.Pin(ReasonPodDeleted, slurmAt), "other words")
	assert.Equal(t, r, r.Pin(ReasonCordoned+" : Not responding", slurmAt), "Slurm's cause appended")
	assert.Equal(t, r, r.Pin(ReasonCordoned, time.Time{}), "no time from Slurm")
	assert.Equal(t, Record{}, Record{}.Pin("", slurmAt))

	assert.Equal(t, "slurm@2026-11-28T02:19:04Z onepool: node cordoned", p.Text())
	assert.True(t, p.Equal(Parse(p.Text())), "round trip")
	assert.Equal(t, p, Read(p.Annotations("r", "t"), "r", "t"))
	assert.True(t, Parse("slurm@yesterday "+ReasonCordoned).At.IsZero(), "a time that does not parse")
}

func TestRecordText(t *testing.T) {
	r := Record{Reason: "onepool: node cordoned: a b", At: time.Date(2026, 11, 26, 3, 4, 5, 0, time.UTC)}
	assert.Equal(t, "2026-11-26T03:04:05Z onepool: node cordoned: a b", r.Text())
	assert.True(t, r.Equal(Parse(r.Text())), "round trip")
	assert.Empty(t, Record{}.Text())
	for _, bad := range []string{"", "onepool: node cordoned", "yesterday onepool: node cordoned"} {
		got := Parse(bad)
		assert.True(t, got.At.IsZero(), "%q read as %+v", bad, got)
		assert.False(t, got.Matches(true, got.Reason, time.Time{}), "%q: a record without a time must match nothing", bad)
	}
}

func TestSlurmAppended(t *testing.T) {
	for _, tc := range []struct {
		reason, base string
		appended     bool
		shows        bool
	}{
		{"onepool: nodeset update : Not responding", ReasonNodeSetUpdate, true, true},
		{"onepool: nodeset update : Kill task failed", ReasonNodeSetUpdate, true, true},
		{"onepool: nodeset update", ReasonNodeSetUpdate, false, true},
		{"onepool: nodeset update: Not responding", ReasonNodeSetUpdate, false, false},
		{"onepool: nodeset updated", ReasonNodeSetUpdate, false, false},
		{" : Not responding", "", false, false},
		{"Not responding", ReasonNodeSetUpdate, false, false},
	} {
		assert.Equal(t, tc.appended, SlurmAppended(tc.reason, tc.base), "SlurmAppended(%q, %q)", tc.reason, tc.base)
		assert.Equal(t, tc.shows, Shows(tc.reason, tc.base), "Shows(%q, %q)", tc.reason, tc.base)
	}
}
