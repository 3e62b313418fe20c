package keys

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestCordonReason(t *testing.T) {
	long := strings.Repeat("x", 250)
	// 'é' is two bytes: a cut at MaxOperatorReason-len(mark) bytes would land inside one.
	accents := strings.Repeat("é", 150)
	for _, tc := range []struct {
		name, words, want, note string
	}{
		{"none", "", "onepool: node cordoned", ""},
		{"blank", "  ", "onepool: node cordoned", ""},
		{"words", "replace PSU", "onepool: node cordoned: replace PSU", ""},
		{"exactly the limit", strings.Repeat("y", MaxOperatorReason), "onepool: node cordoned: " + strings.Repeat("y", MaxOperatorReason), ""},
		{"line break", "line\nbreak", "onepool: node cordoned: line break", "control characters replaced by spaces"},
		{"bad utf8", "bad \xff utf8", "onepool: node cordoned: bad   utf8", "control characters replaced by spaces"},
		{"too long", long, "onepool: node cordoned: " + long[:MaxOperatorReason-len(TruncatedMark)] + TruncatedMark, "cut to 200 bytes"},
		{"too long, multi-byte", accents, "onepool: node cordoned: " + strings.Repeat("é", 98) + TruncatedMark, "cut to 200 bytes"},
		{"only control characters", "\x01\x02", "onepool: node cordoned", "control characters replaced by spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := CordonReason(tc.words)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.note, note)
			assert.True(t, utf8.ValidString(got), "reason is valid UTF-8")
			assert.LessOrEqual(t, len(got), len(ReasonCordoned)+2+MaxOperatorReason)
			assert.True(t, SyncerOwns(got), "the syncer's own reason has the syncer's form")
		})
	}
}

func TestOwnershipForms(t *testing.T) {
	for _, tc := range []struct {
		reason                 string
		syncer, nodeset, agent bool
	}{
		{reason: "onepool: node cordoned", syncer: true},
		{reason: "onepool: node cordoned: PSU swap", syncer: true},
		// No delimiter after the cordon reason: not the syncer's form.
		{reason: "onepool: node cordoned by admin alice"},
		{reason: "onepool: node cordonedX"},
		{reason: "onepool: slurmd pod deleted", syncer: true},
		{reason: "onepool: slurmd pod deleted later"},
		{reason: "onepool: slurmd pod not ready", syncer: true},
		{reason: "onepool: nodeset update", nodeset: true},
		{reason: "onepool: node left nodeset gpus", nodeset: true},
		{reason: "onepool: node left nodesetX"},
		{reason: "onepool: gpu xid: 79 on GPU 3", agent: true},
		{reason: "onepool: maintenance by admin"},
		{reason: "bad ECC"},
	} {
		assert.Equal(t, tc.syncer, SyncerOwns(tc.reason), "SyncerOwns(%q)", tc.reason)
		assert.Equal(t, tc.nodeset, NodeSetOwns(tc.reason), "NodeSetOwns(%q)", tc.reason)
		assert.Equal(t, tc.agent, AgentOwns(tc.reason), "AgentOwns(%q)", tc.reason)
	}
}

func TestDrainRecord(t *testing.T) {
	at := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	r := DrainRecord{Reason: ReasonCordoned, At: at}
	assert.JSONEq(t, `{"metadata":{"annotations":{"r":"onepool: node cordoned","t":"2026-11-24T01:00:00Z"}}}`, string(r.MergePatch("r", "t")))
	assert.JSONEq(t, `{"metadata":{"annotations":{"r":null,"t":null}}}`, string(DrainRecord{}.MergePatch("r", "t")))
	assert.Equal(t, r, ReadDrainRecord(r.Annotations("r", "t"), "r", "t"))
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
	} {
		assert.Equal(t, tc.want, r.Matches(tc.drained, tc.reason, tc.changed), tc.name)
	}
	assert.False(t, DrainRecord{Reason: ReasonCordoned}.Matches(true, ReasonCordoned, at), "a record without a time")
}
