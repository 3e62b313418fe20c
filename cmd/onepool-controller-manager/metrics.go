package main

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/onepool/onepool/internal/webhookcert"
)

// metricsFlags: where /metrics is served and how it is protected.
type metricsFlags struct {
	addr    string
	secure  bool
	certDir string
	service string
	// scheduler: the scheduler's metrics Service, whose pair the kept
	// certificate Secret holds too.
	scheduler string
}

// SchedulerMetricsLeaf is the key of the scheduler's metrics pair in the
// kept certificate Secret (<key>.crt, <key>.key: the chart mounts those).
const SchedulerMetricsLeaf = "scheduler-metrics"

func (f *metricsFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "metrics-bind-address", ":8443", "address of /metrics; 0 turns it off")
	fs.BoolVar(&f.secure, "metrics-secure", true, "serve /metrics over HTTPS to callers the API server authenticates (TokenReview) and authorizes to get the non-resource URL /metrics (SubjectAccessReview); false: plain HTTP to anyone who reaches the port")
	fs.StringVar(&f.certDir, "metrics-cert-dir", "", "directory with the metrics server's tls.crt and tls.key (re-read when they change); empty: the webhook's certificate when the manager keeps it and --metrics-service is set, else a self-signed one")
	fs.StringVar(&f.scheduler, "scheduler-metrics-service", "", "namespace/name of the scheduler's metrics Service: the webhook certificate Secret the manager keeps holds a pair for it too ("+SchedulerMetricsLeaf+".crt and .key, signed by the same CA), which the scheduler's pods serve /metrics with, so scrapers verify them with the Secret's ca.crt")
	fs.StringVar(&f.service, "metrics-service", "", "namespace/name of the metrics Service: the webhook certificate the manager keeps (--webhook-cert-secret) names it too, and serves /metrics with it, so scrapers verify it with the Secret's ca.crt")
}

// check validates the flags.
func (f metricsFlags) check() error {
	if f.scheduler != "" {
		if _, err := parseName("scheduler-metrics-service", f.scheduler); err != nil {
			return err
		}
	}
	if f.service != "" {
		if _, err := parseName("metrics-service", f.service); err != nil {
			return err
		}
		if !f.secure {
			return fmt.Errorf("--metrics-service needs --metrics-secure")
		}
	}
	return nil
}

// leaves are the other components' pairs the kept certificate holds.
func (f metricsFlags) leaves() []webhookcert.Leaf {
	if f.scheduler == "" {
		return nil
	}
	n, _ := parseName("scheduler-metrics-service", f.scheduler) // checked
	return []webhookcert.Leaf{{Key: SchedulerMetricsLeaf, Services: []types.NamespacedName{n}}}
}

// extraService is the metrics Service for the kept certificate, if any.
func (f metricsFlags) extraService() []types.NamespacedName {
	if f.service == "" || !f.secure {
		return nil
	}
	n, _ := parseName("metrics-service", f.service) // checked
	return []types.NamespacedName{n}
}

// options are the metrics server's; keptCertDir is the webhook
// certificate's dir when the manager keeps it ("" when not).
func (f metricsFlags) options(keptCertDir string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: f.addr}
	if !f.secure {
		return o
	}
	o.SecureServing = true
	o.FilterProvider = filters.WithAuthenticationAndAuthorization
	o.CertDir = f.certDir
	if o.CertDir == "" && keptCertDir != "" && f.service != "" {
		o.CertDir = keptCertDir
		o.CertName, o.KeyName = "tls.crt", "tls.key"
	}
	return o
}
