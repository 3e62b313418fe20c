package rest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest/model"
)

// A job's time limit as slurmrestd reads it: minutes rounded up, nothing
// for the partition's default, and infinite for UNLIMITED (what
// `sbatch --time=UNLIMITED` sends).
func TestJobDescTimeLimit(t *testing.T) {
	for _, tc := range []struct {
		limit time.Duration
		want  string
	}{
		{90 * time.Minute, `{"set":true,"number":90}`},
		{90*time.Minute + time.Second, `{"set":true,"number":91}`},
		{model.UnlimitedTime, `{"set":true,"infinite":true}`},
		{0, ``},
	} {
		assert.Equal(t, tc.want, descField(t, model.JobSubmit{Name: "x", TimeLimit: tc.limit}, "time_limit"), "time limit %v", tc.limit)
	}
}

// Excluded nodes go as slurmrestd's csv_string (a JSON array of names), and
// not at all when there are none.
func TestJobDescExcludedNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"gpu-0", "gpu-3"}, `["gpu-0","gpu-3"]`},
		{nil, ``},
	} {
		assert.Equal(t, tc.want, descField(t, model.JobSubmit{Name: "x", ExcludedNodes: tc.nodes}, "excluded_nodes"), "excluded %v", tc.nodes)
	}
}

// An update sets the excluded nodes only when asked; none clears them,
// sent as [""]: slurmrestd keeps ExcNodeList on [] (24.11, measured on the
// lab: `scontrol show job` still listed the node).
func TestUpdateDescExcludedNodes(t *testing.T) {
	field := func(u model.JobUpdate) string {
		b, err := json.Marshal(updateDesc(u))
		require.NoError(t, err)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &fields))
		return string(fields["excluded_nodes"])
	}
	assert.Equal(t, ``, field(model.JobUpdate{}))
	assert.Equal(t, `[""]`, field(model.JobUpdate{ExcludedNodes: &[]string{}}))
	assert.Equal(t, `["gpu-1"]`, field(model.JobUpdate{ExcludedNodes: &[]string{"gpu-1"}}))
}

// descField is one field of the job description slurmrestd receives for j,
// as JSON ("" when it is left out).
func descField(t *testing.T, j model.JobSubmit, field string) string {
	t.Helper()
	desc, err := newJobDesc("submit", j)
	require.NoError(t, err)
	b, err := json.Marshal(desc)
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &fields))
	return string(fields[field])
}

// A job's time_limit as slurmrestd writes it: minutes, or infinite.
func TestFromMinutes(t *testing.T) {
	yes, no := true, false
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		v    *noVal32
		want time.Duration
	}{
		{"four hours", &noVal32{Set: &yes, Infinite: &no, Number: n(240)}, 4 * time.Hour},
		{"UNLIMITED (as recorded)", &noVal32{Set: &no, Infinite: &yes, Number: n(0)}, 0},
		{"infinite and set", &noVal32{Set: &yes, Infinite: &yes, Number: n(0)}, 0},
		{"absent", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, fromMinutes(tc.v)) })
	}
}
