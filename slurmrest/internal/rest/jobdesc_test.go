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
		desc, err := newJobDesc("submit", model.JobSubmit{Name: "x", TimeLimit: tc.limit})
		require.NoError(t, err)
		b, err := json.Marshal(desc)
		require.NoError(t, err)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &fields))
		assert.Equal(t, tc.want, string(fields["time_limit"]), "time limit %v", tc.limit)
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
		desc, err := newJobDesc("submit", model.JobSubmit{Name: "x", ExcludedNodes: tc.nodes})
		require.NoError(t, err)
		b, err := json.Marshal(desc)
		require.NoError(t, err)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &fields))
		assert.Equal(t, tc.want, string(fields["excluded_nodes"]), "excluded %v", tc.nodes)
	}
}
