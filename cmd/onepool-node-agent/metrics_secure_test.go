package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"

	"github.com/onepool/onepool/internal/testenv"
)

// The agent's /metrics as a Prometheus on the cluster scrapes it: HTTPS,
// and only for a caller the API server (a real one: envtest) authenticates
// and allows to get /metrics. No token, a token of another
// ServiceAccount, and a token the API server never issued get no series.
func TestMetricsSecure(t *testing.T) {
	env := testenv.Start(t)
	kc, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := context.Background()
	const ns = "default"
	for _, sa := range []string{"prometheus", "tenant"} {
		_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	token := func(sa string) string {
		tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}

	// The admin's pair in --metrics-cert-dir, verified by the scraper.
	dir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("node-agent-metrics.onepool-system.svc", nil, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600))
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(crt))

	h, err := metricsHandler("gpu-3", inventoryOfTwo(t), agentHealth(t))
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := freeAddr(t)
	ms := metricsServing{addr: addr, secure: true, certDir: dir, kube: env.Config}
	require.NoError(t, ms.serve(sctx, h, log.New(io.Discard, "", 0)))

	get := func(tc *tls.Config, token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	verified := &tls.Config{RootCAs: pool, ServerName: "node-agent-metrics.onepool-system.svc", MinVersion: tls.VersionTLS12}
	for _, tt := range []struct {
		name   string
		token  string
		status int
	}{
		{"no token", "", http.StatusUnauthorized},
		// controller-runtime's filter answers 500 when the TokenReview
		// says why it refused (as the controller manager's does).
		{"a token the API server never issued", "not-a-token", http.StatusInternalServerError},
		{"a ServiceAccount not allowed to get /metrics", token("tenant"), http.StatusForbidden},
		{"the metrics reader", token("prometheus"), http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(verified, tt.token)
			assert.Equal(t, tt.status, code, body)
			if tt.status == http.StatusOK {
				assert.Contains(t, body, `onepool_agent_gpus{slurm_node="gpu-3"} 2`)
			} else {
				assert.NotContains(t, body, "onepool_")
			}
		})
	}

	// Plain HTTP to the HTTPS port gets nothing either.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode)
		assert.NotContains(t, string(b), "onepool_")
	}

	// Without --metrics-cert-dir: a self-signed pair, encrypted, not
	// verified (the scraper skips verification, as for kube-scheduler's).
	addr2 := freeAddr(t)
	ms2 := metricsServing{addr: addr2, secure: true, kube: env.Config}
	require.NoError(t, ms2.serve(sctx, h, log.New(io.Discard, "", 0)))
	addr = addr2
	code, body := get(&tls.Config{InsecureSkipVerify: true}, token("prometheus")) //nolint:gosec // the self-signed pair
	assert.Equal(t, http.StatusOK, code, body)

	// Secure without a Kubernetes config, or with a cert dir without a
	// pair: errors at start, nothing served.
	assert.Error(t, metricsServing{addr: freeAddr(t), secure: true}.serve(sctx, h, log.New(io.Discard, "", 0)))
	assert.Error(t, metricsServing{addr: freeAddr(t), secure: true, certDir: t.TempDir(), kube: env.Config}.serve(sctx, h, log.New(io.Discard, "", 0)))
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
