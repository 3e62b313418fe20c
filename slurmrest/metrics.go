package slurmrest

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's and cache's Prometheus series. They register on
// the registerer the caller gives (none: not exported).
type metrics struct {
	requests      *prometheus.CounterVec
	responseBytes *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	cacheEvents   *prometheus.CounterVec
	cacheStale    prometheus.Gauge
	lastSyncAge   *prometheus.GaugeVec
	followedNodes prometheus.Gauge
	tokenExpiry   prometheus.Gauge
	tokenRefused  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_slurmrest_requests_total",
			Help: "slurmrestd requests by endpoint and HTTP status code (\"error\" when no answer came).",
		}, []string{"endpoint", "code"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_slurmrest_response_bytes_total",
			Help: "Bytes of slurmrestd response bodies by endpoint.",
		}, []string{"endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onepool_slurmrest_request_duration_seconds",
			Help:    "slurmrestd request latency by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14),
		}, []string{"endpoint"}),
		cacheEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onepool_slurmrest_cache_events_total",
			Help: "Change events the cache delivered, by object kind and event type.",
		}, []string{"kind", "type"}),
		cacheStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onepool_slurmrest_cache_stale",
			Help: "1 while the cache has not refreshed within its bound and answers unknown.",
		}),
		lastSyncAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onepool_slurmrest_cache_last_sync_age_seconds",
			Help: "Seconds since the last good refresh of the cache, by object kind.",
		}, []string{"kind"}),
		followedNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onepool_slurmrest_cache_followed_nodes",
			Help: "Nodes the cache reads by name each poll (0: it asks the whole table's delta each poll instead).",
		}),
		tokenExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onepool_slurmrest_token_expiry_timestamp_seconds",
			Help: "When the slurmrestd token requests carry expires (Unix time); 0 when it says none.",
		}),
		tokenRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onepool_slurmrest_token_refused_total",
			Help: "Requests slurmrestd refused for the token (HTTP 401 or 511).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.responseBytes, m.duration, m.cacheEvents, m.cacheStale, m.lastSyncAge, m.followedNodes, m.tokenExpiry, m.tokenRefused} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
