package main

import (
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
