package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/stdr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/internal/buildinfo"
)

// The env vars of --metrics-bind-address, --metrics-secure and
// --metrics-cert-dir.
const (
	envMetricsAddr    = "ONEPOOL_METRICS_BIND_ADDRESS"
	envMetricsSecure  = "ONEPOOL_METRICS_SECURE"
	envMetricsCertDir = "ONEPOOL_METRICS_CERT_DIR"
)

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

// metricsServing is where /metrics is served and how it is protected, as
// the controller manager's: by default HTTPS, to callers the API server
// authenticates (TokenReview) and allows to get the non-resource URL
// /metrics (SubjectAccessReview), with the agent's own credentials.
type metricsServing struct {
	addr    string // "" off
	secure  bool
	certDir string // tls.crt and tls.key, re-read when they change; "": self-signed
	// kube is the agent's Kubernetes config, which the reviews are asked
	// with (required when secure).
	kube *rest.Config
}

func addMetricsFlags(f *envFlags, m *metricsServing) {
	f.String(&m.addr, "metrics-bind-address", envMetricsAddr, "", "serve /metrics (the build, the node's GPU count and health checks) on this address, e.g. :8082; empty: off")
	f.Bool(&m.secure, "metrics-secure", envMetricsSecure, true, "serve /metrics over HTTPS to callers the API server authenticates (TokenReview) and allows to get the non-resource URL /metrics (SubjectAccessReview); false: plain HTTP to anyone who reaches the port")
	f.String(&m.certDir, "metrics-cert-dir", envMetricsCertDir, "", "directory with the metrics server's tls.crt and tls.key (re-read when they change); empty: a self-signed certificate")
}

// serve listens on m.addr and serves h until ctx ends. It returns once the
// port listens: a port in use, a certificate that does not load or a
// Kubernetes config the reviews cannot be asked with is an error at start.
func (m metricsServing) serve(ctx context.Context, h http.Handler, logger *log.Logger) error {
	if m.addr == "" {
		return nil
	}
	var tc *tls.Config
	if m.secure {
		var err error
		if h, err = m.protect(h, logger); err != nil {
			return err
		}
		if tc, err = m.tlsConfig(ctx); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", m.addr)
	if err != nil {
		return err
	}
	scheme := "http"
	if tc != nil {
		l, scheme = tls.NewListener(l, tc), "https"
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
	logger.Printf("metrics on %s://%s/metrics", scheme, l.Addr())
	return nil
}

// protect puts controller-runtime's authentication and authorization
// filter in front of h.
func (m metricsServing) protect(h http.Handler, logger *log.Logger) (http.Handler, error) {
	if m.kube == nil {
		return nil, errors.New("--metrics-secure needs the agent's Kubernetes config")
	}
	hc, err := rest.HTTPClientFor(m.kube)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(m.kube, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	return filter(stdr.New(logger).WithName("metrics"), h)
}

// tlsConfig serves --metrics-cert-dir's pair, else a self-signed one
// (encrypted, not verified, as kube-scheduler's own). HTTP/2 is off, as in
// controller-runtime's metrics server (its stream handling was a
// denial-of-service vector, CVE-2023-44487).
func (m metricsServing) tlsConfig(ctx context.Context) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if m.certDir == "" {
		crt, key, err := certutil.GenerateSelfSignedCertKey("onepool-node-agent", nil, nil)
		if err != nil {
			return nil, fmt.Errorf("metrics: self-signed certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(crt, key)
		if err != nil {
			return nil, fmt.Errorf("metrics: self-signed certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
		return tc, nil
	}
	w, err := certwatcher.New(filepath.Join(m.certDir, "tls.crt"), filepath.Join(m.certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("--metrics-cert-dir: %w", err)
	}
	go func() { _ = w.Start(ctx) }()
	tc.GetCertificate = w.GetCertificate
	return tc, nil
}
