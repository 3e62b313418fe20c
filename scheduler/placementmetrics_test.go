package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlacementMetricState(t *testing.T) {
	tests := []struct {
		name string
		p    placement
		want string
	}{
		{"an incomplete gang", placement{waiting: "2 of 4 pods"}, placementWaiting},
		{"refused by Slurm", placement{rejected: true}, placementWaiting},
		{"in Slurm's queue", placement{jobID: 12}, placementPending},
		{"allocated", placement{jobID: 12, nodes: []string{"gpu-0"}}, placementPlaced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, tt.p.metricState()) })
	}
}

func TestPlacementCollector(t *testing.T) {
	now := time.Now()
	gate := NewLeaderGate()
	c := placementCollector{leader: gate, rec: coreRecords{&store{places: map[string]*placement{
		"a": {jobID: 1, submitted: now.Add(-90 * time.Second)},
		"b": {jobID: 2, submitted: now.Add(-10 * time.Second)},
		"c": {jobID: 3, submitted: now.Add(-time.Hour), nodes: []string{"gpu-0"}}, // placed: not waiting
		"d": {waiting: "1 of 2 pods"},
	}}}}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, registerCollector(reg, c))
	assert.Equal(t, 0, testutil.CollectAndCount(c), "a standby says nothing")

	gate.Lead()
	want := `# HELP onepool_scheduler_placements Placements (a pod, or a gang) by state: waiting (no Slurm job yet: an incomplete gang, a tenant's GPU cap, no fitting node, refused by Slurm), pending (its job waits in Slurm's queue), placed (Slurm allocated it). Served by the leader.
# TYPE onepool_scheduler_placements gauge
onepool_scheduler_placements{state="pending"} 2
onepool_scheduler_placements{state="placed"} 1
onepool_scheduler_placements{state="waiting"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "onepool_scheduler_placements"))
	oldest := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		for _, m := range collect(c) {
			if strings.Contains(m.Desc().String(), "oldest_pending") {
				ch <- m
			}
		}
	}))
	assert.InDelta(t, 90, oldest, 5, "the oldest job in Slurm's queue, not the placed one")
}

func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var out []prometheus.Metric
	for m := range ch {
		out = append(out, m)
	}
	return out
}
