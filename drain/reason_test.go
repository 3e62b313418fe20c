package drain

import (
	"strings"
	"testing"
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
			assert.Equal(t, Syncer, Form(got), "the syncer's own reason has the syncer's form")
		})
	}
}

func TestHealthReason(t *testing.T) {
	r := HealthReason("nvml", strings.Repeat("x", 300)+"\"\n")
	assert.Less(t, len(r), 200, r)
	assert.True(t, strings.HasSuffix(r, "..."), r)
	assert.Equal(t, "onepool: gpu nvml: a 'b' c", HealthReason("nvml", "a \"b\"\tc"))
	assert.Equal(t, "onepool: gpu xid: 79 on GPU 3", HealthReason("xid", "79 on GPU 3"))
}

func TestLeftReason(t *testing.T) {
	assert.Equal(t, "onepool: node left nodeset h100", LeftReason("h100"))
}

func TestMIGConfigReason(t *testing.T) {
	assert.Equal(t, "onepool: mig config all-1g.10gb", MIGConfigReason("all-1g.10gb"))
}

func TestReplacesPod(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   bool
	}{
		{ReasonNodeSetUpdate, true},
		{ReasonNodeSetUpdate + " : Not responding", true}, // Slurm's cause appended
		{MIGConfigReason("all-balanced"), true},
		{MIGConfigReason("all-balanced") + " : Kill task failed", true},
		{ReasonMIGConfig, false}, // no layout: not the NodeSet's form
		{ReasonNodeSetUpdate + "d", false},
		{LeftReason("h100"), false}, // the node leaves: its pod is not replaced
		{ReasonCordoned, false},
		{"", false},
	} {
		assert.Equal(t, tc.want, ReplacesPod(tc.reason), "ReplacesPod(%q)", tc.reason)
	}
}
