package scheduler

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the plugin's series, in kube-scheduler's registry beside
// its own (the slurmrest client's onepool_slurmrest_* series go there too).
type metrics struct {
	submissions   *prometheus.CounterVec
	pending       prometheus.Histogram
	submitToBound prometheus.Histogram
	evictions     *prometheus.CounterVec
	release       *prometheus.CounterVec
}

// Label values of the plugin's counters.
const (
	submitAllocated = "allocated"
	submitSubmitted = "submitted"
	submitRejected  = "rejected"
	submitFailed    = "failed"

	causeJobMissing = "job_missing"
	causeJobEnded   = "job_ended"
	causePreempted  = "preempted"
)

// latencyBuckets run from 10 ms to about 3 hours.
var latencyBuckets = prometheus.ExponentialBuckets(0.01, 2.5, 14)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_scheduler_submissions_total",
			Help: "Placeholder job submissions to Slurm by outcome: allocated (granted at once), submitted (queued), rejected (Slurm refused what the pod asks), failed (to be retried).",
		}, []string{"outcome"}),
		pending: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "onepool_scheduler_slurm_pending_seconds",
			Help:    "Time a placeholder job waited in Slurm's queue: submitted until onepool saw it start.",
			Buckets: latencyBuckets,
		}),
		submitToBound: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "onepool_scheduler_submit_to_bound_seconds",
			Help:    "Time from a placeholder job's submission until its pod was bound to the node Slurm allocated.",
			Buckets: latencyBuckets,
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_scheduler_evictions_total",
			Help: "Pods evicted because of their Slurm job, by cause: job_ended, job_missing, preempted.",
		}, []string{"cause"}),
		release: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_scheduler_release_answers_total",
			Help: "Answers to placeholder scripts and release epilogs asking whether their pod is gone: gone, present, unknown, standby, syncing, error.",
		}, []string{"answer"}),
	}
	// Each outcome's and cause's series exists from the start, at 0: a
	// rate, and the dashboard's panels, see the first one.
	for _, o := range []string{submitAllocated, submitSubmitted, submitRejected, submitFailed} {
		m.submissions.WithLabelValues(o)
	}
	for _, c := range []string{causeJobMissing, causeJobEnded, causePreempted} {
		m.evictions.WithLabelValues(c)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.submissions, m.pending, m.submitToBound, m.evictions, m.release} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				continue // a second profile of the plugin: the first one's series stay
			}
			return nil, err
		}
	}
	return m, nil
}
