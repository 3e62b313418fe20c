package syncer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Directions and outcomes of the actions metric.
const (
	dirToSlurm = "k8s_to_slurm"
	dirToKube  = "slurm_to_k8s"

	outcomeSuccess = "success"
	outcomeError   = "error"
	outcomeUnknown = "skipped_unknown"

	actionDrain     = "drain"
	actionRedrain   = "redrain"
	actionResume    = "resume"
	actionAnnotate  = "annotate"
	actionCondition = "condition"
	actionNone      = "none"
)

type metrics struct {
	actions *prometheus.CounterVec
	lag     *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_syncer_actions_total",
			Help: "Syncer actions by direction (k8s_to_slurm, slurm_to_k8s), action and outcome (success, error, skipped_unknown).",
		}, []string{"direction", "action", "outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onepool_syncer_sync_lag_seconds",
			Help:    "From the event that asked for a change (watch or Slurm cache event) to the change being made, by direction.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"direction"}),
	}
	// Every action's series exists from the start, at 0: a rate, and the
	// chart's SyncerActionsFailing alert, see the first error.
	for _, a := range []struct{ dir, action string }{
		{dirToSlurm, actionDrain}, {dirToSlurm, actionRedrain}, {dirToSlurm, actionResume},
		{dirToKube, actionAnnotate}, {dirToKube, actionCondition},
	} {
		m.actions.WithLabelValues(a.dir, a.action, outcomeSuccess)
		m.actions.WithLabelValues(a.dir, a.action, outcomeError)
	}
	m.actions.WithLabelValues(dirToSlurm, actionNone, outcomeUnknown)
	m.lag.WithLabelValues(dirToSlurm)
	m.lag.WithLabelValues(dirToKube)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.actions, m.lag} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
