package rest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest/model"
)

// TestSlurmTextOnEveryRelease holds the English texts onepool decides on
// against every recorded answer of both releases: each matches exactly the
// recordings it is for, and no other failure.
func TestSlurmTextOnEveryRelease(t *testing.T) {
	want := map[string]string{
		"v0.0.42/node_unknown.200.json":        "unknown node",
		"v0.0.44/node_unknown.200.json":        "unknown node",
		"v0.0.42/nodes_since_changed.500.json": "partition bug",
	}
	files, err := filepath.Glob(filepath.Join("testdata", "v0.0.4*", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	failures := 0
	for _, f := range files {
		rel := filepath.ToSlash(strings.TrimPrefix(f, "testdata"+string(filepath.Separator)))
		parts := strings.Split(filepath.Base(f), ".")
		status, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil {
			continue // not a recording named WHAT.STATUS.json
		}
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		errs, derr := DecodeErrors(body)
		if derr != nil || (status < 300 && len(errs) == 0) {
			continue // not a failure, or not a JSON answer
		}
		failures++
		ae := &model.APIError{StatusCode: status, Errors: errs}
		got := ""
		switch {
		case isUnknownNode(ae) && isPartitionQueryBug(ae):
			got = "both"
		case isUnknownNode(ae):
			got = "unknown node"
		case isPartitionQueryBug(ae):
			got = "partition bug"
		}
		assert.Equal(t, want[rel], got, rel)
		delete(want, rel)
	}
	assert.Empty(t, want, "recordings the texts are for are missing")
	assert.Greater(t, failures, 10, "too few failure recordings to tell the texts apart")
}
