package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/internal/webhookcert"
)

func TestMetricsFlags(t *testing.T) {
	base := []string{"--slurmrest-url", "http://slurmrestd:6820", "--slurmrest-token-file", "/t"}
	tests := []struct {
		name        string
		args        []string
		keptCertDir string
		wantErr     string
		secure      bool
		certDir     string
		extra       []types.NamespacedName
		leaves      []webhookcert.Leaf
	}{
		{name: "default: HTTPS with authn/authz, a self-signed certificate", secure: true},
		{name: "the kept webhook certificate names the metrics Service", args: []string{"--metrics-service", "onepool/cm-metrics"},
			keptCertDir: "/certs", secure: true, certDir: "/certs", extra: []types.NamespacedName{{Namespace: "onepool", Name: "cm-metrics"}}},
		{name: "a cert dir given wins", args: []string{"--metrics-service", "onepool/cm-metrics", "--metrics-cert-dir", "/mine"},
			keptCertDir: "/certs", secure: true, certDir: "/mine", extra: []types.NamespacedName{{Namespace: "onepool", Name: "cm-metrics"}}},
		{name: "no kept certificate: self-signed", args: []string{"--metrics-service", "onepool/cm-metrics"}, secure: true,
			extra: []types.NamespacedName{{Namespace: "onepool", Name: "cm-metrics"}}},
		{name: "plain HTTP on request", args: []string{"--metrics-secure=false"}, keptCertDir: "/certs"},
		{name: "a Service without HTTPS", args: []string{"--metrics-secure=false", "--metrics-service", "onepool/cm-metrics"}, wantErr: "--metrics-service needs --metrics-secure"},
		{name: "a Service name without namespace", args: []string{"--metrics-service", "cm-metrics"}, wantErr: "want namespace/name"},
		{name: "the kept certificate Secret holds the scheduler's pair", args: []string{"--scheduler-metrics-service", "onepool/sched-metrics"}, secure: true,
			leaves: []webhookcert.Leaf{{Key: "scheduler-metrics", Services: []types.NamespacedName{{Namespace: "onepool", Name: "sched-metrics"}}}}},
		{name: "a scheduler Service name without namespace", args: []string{"--scheduler-metrics-service", "sched-metrics"}, wantErr: "want namespace/name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(append(append([]string{}, base...), tt.args...))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			o := c.metrics.options(tt.keptCertDir)
			assert.Equal(t, ":8443", o.BindAddress)
			assert.Equal(t, tt.secure, o.SecureServing)
			assert.Equal(t, tt.secure, o.FilterProvider != nil, "callers authenticated and authorized exactly when secure")
			assert.Equal(t, tt.certDir, o.CertDir)
			assert.Equal(t, tt.extra, c.metrics.extraService())
			assert.Equal(t, tt.leaves, c.metrics.leaves())
		})
	}
}
