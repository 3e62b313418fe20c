package syncer

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/slurmrest"
)

// The syncer's decisions are in the debug log at level 1 when they change
// something or leave a drain onepool does not own; a resync that changes
// nothing is at level 2 only. What a failed run needs to tell why a drain
// stayed is in the line: who owns Slurm's drain, Slurm's words and time,
// and onepool's records.
func TestDecisionsInTheDebugLog(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 28, 40, 0, time.UTC)
	ours := drainRecord{Record: drain.Record{Reason: drain.ReasonPodDeleted, At: now}}
	drained := slurmrest.Node{Name: "dyn-0", State: slurmrest.NodeState{"IDLE", "DRAIN"}, Reason: drain.ReasonPodDeleted, ReasonChanged: now}
	idle := slurmrest.Node{Name: "dyn-0", State: slurmrest.NodeState{"IDLE"}}
	tests := []struct {
		name      string
		o         observed
		wantLevel int
		want      []string
	}{
		{"onepool's drain resumed", observed{now: now, podReady: true, record: ours, slurm: drained}, 1,
			[]string{`"action"="resume"`, `"owner"="syncer"`, `"record"="inPlace=2026-12-01T20:28:40Z onepool: slurmd pod deleted`, `"slurmReasonAt"="2026-12-01T20:28:40Z"`}},
		{"a drain in onepool's words it has no record of", observed{now: now, podReady: true, slurm: drained}, 1,
			[]string{`"action"="none"`, `"owner"="admin"`, `"slurmReason"="onepool: slurmd pod deleted"`}},
		{"the pod deleted: drained", observed{now: now, podReady: true, podGone: true, slurm: idle}, 1,
			[]string{`"action"="drain"`, `"cause"="onepool: slurmd pod deleted"`, `"newRecord"="inPlace=2026-12-01T20:28:40Z onepool: slurmd pod deleted`}},
		{"nothing to do", observed{now: now, podReady: true, slurm: idle}, 2, []string{`"action"="none"`, `"owner"="none"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, verbosity := range []int{1, 2} {
				var lines []string
				log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
				logDecision(log, "dyn-0", tt.o, plan(tt.o))
				if verbosity < tt.wantLevel {
					assert.Empty(t, lines, "at verbosity %d", verbosity)
					continue
				}
				if assert.Len(t, lines, 1, "at verbosity %d", verbosity) {
					for _, w := range tt.want {
						assert.True(t, strings.Contains(lines[0], w), "%s\nwant %s", lines[0], w)
					}
				}
			}
		})
	}
}
