package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The node agent's series: what its GPUs are and whether they pass the
// health checks (the same checks as the health command, which drains).
var (
	descGPUs = prometheus.NewDesc("onepool_agent_gpus",
		"GPUs the node agent finds on its node (NVML's count at the last health check).",
		[]string{"slurm_node"}, nil)
	descHealthy = prometheus.NewDesc("onepool_agent_gpus_healthy",
		"1 when the node's GPUs pass every health check (the checks Slurm's HealthCheckProgram runs: NVML, count, XIDs, ECC, retired pages, row remapping, temperature), 0 when one fails.",
		[]string{"slurm_node"}, nil)
	descFailure = prometheus.NewDesc("onepool_agent_health_check_failed",
		"1 for each health check the node's GPUs fail now, 0 for each they pass, by check: nvml, count, xid, ecc, retired_pages, row_remap, temperature.",
		[]string{"slurm_node", "check"}, nil)
)

// HealthCollector exports a node's GPU count and health, checking at most
// once per MinInterval (NVML is not asked at every scrape of every
// Prometheus replica).
type HealthCollector struct {
	SlurmNode   string
	Check       func(context.Context) Verdict
	MinInterval time.Duration
	Now         func() time.Time

	mu   sync.Mutex
	last Verdict
	at   time.Time
}

// NewHealthCollector checks lib with cfg (bounded by cfg.Timeout).
func NewHealthCollector(slurmNode string, lib Library, cfg HealthConfig) *HealthCollector {
	return &HealthCollector{SlurmNode: slurmNode, MinInterval: 30 * time.Second, Now: time.Now,
		Check: func(ctx context.Context) Verdict { return CheckHealth(ctx, lib, cfg) }}
}

// Describe implements prometheus.Collector.
func (c *HealthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGPUs
	ch <- descHealthy
	ch <- descFailure
}

// Collect implements prometheus.Collector.
func (c *HealthCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.verdict()
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(v.GPUs), c.SlurmNode)
	healthy := 0.0
	if v.Healthy() {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, c.SlurmNode)
	// Every check's series, 0 while it passes: the alert and a rate see
	// the first failure, one series per check however many GPUs fail it.
	failed := map[string]bool{}
	for _, f := range v.Failures {
		failed[f.Check] = true
	}
	for _, check := range healthChecks {
		value := 0.0
		if failed[check] {
			value = 1
		}
		ch <- prometheus.MustNewConstMetric(descFailure, prometheus.GaugeValue, value, c.SlurmNode, strings.ReplaceAll(check, " ", "_"))
	}
}

func (c *HealthCollector) verdict() Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.Now(); c.at.IsZero() || now.Sub(c.at) >= c.MinInterval {
		c.last, c.at = c.Check(context.Background()), now
	}
	return c.last
}
