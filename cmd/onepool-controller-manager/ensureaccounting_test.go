package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnsureAccountingFlags(t *testing.T) {
	var stderr bytes.Buffer
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--config and --slurmrest-url are required"},
		{[]string{"--config", "a.json", "--slurmrest-url", "http://x:6820"}, "one of --slurmrest-token-file, --slurmrest-jwt-key-file is required"},
		{[]string{"--config", "a.json", "--slurmrest-url", "http://x:6820", "--slurmrest-token-file", "t", "--slurmrest-jwt-key-file", "k"}, "one of"},
		{[]string{"--config", "a.json", "--slurmrest-url", "http://x:6820", "--slurmrest-token-file", "t", "--timeout", "0s"}, "must be positive"},
		{[]string{"--config", "a.json", "--slurmrest-url", "http://x:6820", "--slurmrest-token-file", "t", "extra"}, "unexpected arguments"},
	} {
		_, err := parseEnsureAccountingFlags(tc.args, &stderr)
		assert.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
	c, err := parseEnsureAccountingFlags([]string{"--config", "a.json", "--slurmrest-url", "http://x:6820", "--slurmrest-jwt-key-file", "k"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "slurm", c.tokenUser, "SlurmUser: slurmdbd's admin")
}

// A bad config is refused before slurmrestd is asked anything (exit 2);
// a slurmrestd without slurmdbd's endpoints ends the run at once (exit 1).
func TestRunEnsureAccounting(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "jwt_hs256.key")
	require.NoError(t, os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600))
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked++
		if r.URL.Path == "/slurm/v0.0.42/ping/" {
			_ = json.NewEncoder(w).Encode(map[string]any{"meta": map[string]any{"plugin": map[string]any{"data_parser": "data_parser/v0.0.42"}}})
			return
		}
		http.Error(w, "Unable find requested URL. Please view /openapi/v3 for API reference.", http.StatusNotFound)
	}))
	defer srv.Close()
	conf := filepath.Join(dir, "accounting.json")
	args := []string{"--config", conf, "--slurmrest-url", srv.URL, "--slurmrest-jwt-key-file", key, "--slurmrest-api-version", "v0.0.42", "--poll", "10ms"}

	require.NoError(t, os.WriteFile(conf, []byte(`{"cluster": "onepool", "qos": [{"name": "high", "preemptMode": "suspend"}]}`), 0o644))
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, runEnsureAccounting(args, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `qos high: preemptMode "suspend"`)
	assert.Zero(t, asked)

	require.NoError(t, os.WriteFile(conf, []byte(`{"cluster": "onepool", "qos": [{"name": "high", "priority": 1000}]}`), 0o644))
	stderr.Reset()
	assert.Equal(t, 1, runEnsureAccounting(args, &stdout, &stderr))
	assert.True(t, strings.HasPrefix(stderr.String(), "ensure-accounting: cluster onepool: slurmrestd has no slurmdbd endpoints"), stderr.String())
}
