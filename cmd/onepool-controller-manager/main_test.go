package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
)

// The chart passes --zap-log-level from controllerManager.logLevel; a
// level the flag does not take must fail at start, not be ignored.
func TestParseFlagsLogLevel(t *testing.T) {
	base := []string{"--slurmrest-url=http://slurm:6820", "--slurmrest-token-file=/t"}
	for _, tc := range []struct {
		arg     string
		want    zapcore.Level
		wantErr bool
	}{
		{"--zap-log-level=3", zapcore.Level(-3), false},
		{"--zap-log-level=info", zapcore.InfoLevel, false},
		{"--zap-log-level=0", 0, true},
		{"--zap-log-level=loud", 0, true},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			c, err := parseFlags(append(base, tc.arg))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, c.log.Level)
			assert.True(t, c.log.Level.Enabled(tc.want))
			assert.False(t, c.log.Level.Enabled(tc.want-1))
		})
	}
}

// The topology flags: off by default; levels need a namespace/name ConfigMap.
func TestParseFlagsTopology(t *testing.T) {
	base := []string{"--slurmrest-url=http://slurm:6820", "--slurmrest-token-file=/t"}
	for _, tc := range []struct {
		args    []string
		levels  []string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"--topology-levels=a/spine,a/leaf", "--topology-configmap=slurm/slurm-topology"}, []string{"a/spine", "a/leaf"}, ""},
		{[]string{"--topology-levels=a/spine"}, nil, "want namespace/name"},
		{[]string{"--topology-levels=a/spine,a/spine", "--topology-configmap=slurm/t"}, nil, "empty or repeated"},
		{[]string{"--topology-levels=a/spine,", "--topology-configmap=slurm/t"}, nil, "empty or repeated"},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			c, err := parseFlags(append(base, tc.args...))
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.levels, c.topology.Levels)
		})
	}
}

// The Slurm credential: a token file or the JWT key to mint tokens from,
// exactly one.
func TestParseFlagsSlurmCredential(t *testing.T) {
	url := "--slurmrest-url=https://slurm:6820"
	for _, tc := range []struct {
		args    []string
		wantErr bool
	}{
		{[]string{url, "--slurmrest-token-file=/t"}, false},
		{[]string{url, "--slurmrest-jwt-key-file=/k", "--slurmrest-token-lifetime=30m", "--slurmrest-ca=/ca.pem"}, false},
		{[]string{url, "--slurmrest-token-file=/t", "--slurmrest-jwt-key-file=/k"}, true},
		{[]string{url}, true},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			c, err := parseFlags(tc.args)
			if tc.wantErr {
				assert.ErrorContains(t, err, "one of --slurmrest-token-file, --slurmrest-jwt-key-file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "slurm", c.slurmTokenUser)
		})
	}
}

// --host-slurmd-nodes: off by default; a selector that parses and names a
// label, else the manager does not start.
func TestParseFlagsHostSlurmdNodes(t *testing.T) {
	base := []string{"--slurmrest-url=http://slurm:6820", "--slurmrest-token-file=/t"}
	for _, tc := range []struct {
		arg     string
		want    string
		wantErr string
	}{
		{"", "", ""},
		{"--host-slurmd-nodes=node-restriction.kubernetes.io/onepool-slurmd-on-host=true", "node-restriction.kubernetes.io/onepool-slurmd-on-host=true", ""},
		{"--host-slurmd-nodes=site/slurm in (a,b)", "site/slurm in (a,b)", ""},
		{"--host-slurmd-nodes=a==b==c", "", "--host-slurmd-nodes"},
		{"--host-slurmd-nodes= ", "", "selects every Node"},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			args := base
			if tc.arg != "" {
				args = append(args, tc.arg)
			}
			c, err := parseFlags(args)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, c.syncer.HostNodes)
				return
			}
			require.NotNil(t, c.syncer.HostNodes)
			assert.Equal(t, tc.want, c.syncer.HostNodes.String())
		})
	}
}

// check-slurm takes the manager's flags: without a slurmrestd URL it
// stops at once (2), before calling anything.
func TestCheckSlurmBadFlags(t *testing.T) {
	var out, errOut strings.Builder
	assert.Equal(t, 2, runCheckSlurm([]string{"--slurmrest-token-file=/t"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "--slurmrest-url")
	assert.Empty(t, out.String())
}
