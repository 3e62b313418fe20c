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
