package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The placements' states at a scrape: what waits where, and for how long.
var (
	descPlacements = prometheus.NewDesc("onepool_scheduler_placements",
		"Placements (a pod, or a gang) by state: waiting (no Slurm job yet: an incomplete gang, a tenant's GPU cap, no fitting node, refused by Slurm), pending (its job waits in Slurm's queue), placed (Slurm allocated it). Served by the leader.",
		[]string{"state"}, nil)
	descOldestPending = prometheus.NewDesc("onepool_scheduler_oldest_pending_seconds",
		"How long the oldest placement whose job waits in Slurm's queue has waited since its submission; 0 when none waits. Served by the leader.",
		nil, nil)
)

// Placement states of the metric.
const (
	placementWaiting = "waiting"
	placementPending = "pending"
	placementPlaced  = "placed"
)

// placementCollector reads the manager's placements at each scrape.
type placementCollector struct {
	rec    coreRecords
	leader Leadership
}

// Describe implements prometheus.Collector.
func (pc placementCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPlacements
	ch <- descOldestPending
}

// Collect implements prometheus.Collector: nothing on a standby replica,
// whose placements are not acted on.
func (pc placementCollector) Collect(ch chan<- prometheus.Metric) {
	if !pc.leader.IsLeader() {
		return
	}
	counts, oldest := pc.rec.placementStats(time.Now())
	for _, s := range []string{placementWaiting, placementPending, placementPlaced} {
		ch <- prometheus.MustNewConstMetric(descPlacements, prometheus.GaugeValue, float64(counts[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(descOldestPending, prometheus.GaugeValue, oldest.Seconds())
}

// metricState is the placement's state as the metric names it.
func (p *placement) metricState() string {
	switch {
	case len(p.nodes) > 0:
		return placementPlaced
	case p.jobID != 0:
		return placementPending
	}
	return placementWaiting
}
