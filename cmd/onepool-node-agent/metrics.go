package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/internal/buildinfo"
)

// envMetricsAddr is the env var of --metrics-bind-address.
const envMetricsAddr = "ONEPOOL_METRICS_BIND_ADDRESS"

// metricsHandler serves the node agent's series: its build, and its
// node's GPU count and health (agent.HealthCollector).
func metricsHandler(slurmNode string, lib agent.Library, health agent.HealthConfig) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{buildinfo.Collector("node-agent"), agent.NewHealthCollector(slurmNode, lib, health)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 30 * time.Second}))
	return mux, nil
}

// serveMetrics listens on addr ("" off) and serves h until ctx ends. It
// returns once the port listens: a port in use is an error at start.
func serveMetrics(ctx context.Context, addr string, h http.Handler, logger *log.Logger) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("metrics server: %v", err)
		}
	}()
	logger.Printf("metrics on %s/metrics", l.Addr())
	return nil
}
