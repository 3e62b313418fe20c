package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/charts"
)

// MetricsReaderSA is the lab's scraper: a ServiceAccount bound to the
// chart's <release>-metrics-reader ClusterRole, as a Prometheus would be.
const MetricsReaderSA = "onepool-metrics-reader"

// MetricsReaderRole is the chart's ClusterRole that may get /metrics.
const MetricsReaderRole = charts.Release + "-metrics-reader"

// MetricsToken mints a token of MetricsReaderSA (made and bound the first
// time), good for an hour.
func (l *Lab) MetricsToken(ctx context.Context) (string, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return "", err
	}
	_, err = kc.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: MetricsReaderSA}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: MetricsReaderSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: MetricsReaderSA, Namespace: SystemNamespace}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	secs := int64(3600)
	tr, err := kc.CoreV1().ServiceAccounts(SystemNamespace).CreateToken(ctx, MetricsReaderSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", MetricsReaderSA, err)
	}
	return tr.Status.Token, nil
}

// GetMetrics GETs a component's /metrics at url with token ("" none), over
// the lab's self-signed serving certificates, and returns the status code
// and body.
func GetMetrics(ctx context.Context, url, token string) (int, []byte, error) {
	return GetMetricsTLS(ctx, url, token, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the lab's self-signed serving certificates
}

// GetMetricsTLS is GetMetrics with the TLS settings given (a CA and the
// server name to verify, as a ServiceMonitor's tlsConfig).
func GetMetricsTLS(ctx context.Context, url, token string, tc *tls.Config) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

// ScrapeMetrics reads url's /metrics as the lab's scraper identity.
func (l *Lab) ScrapeMetrics(ctx context.Context, url string) ([]byte, error) {
	token, err := l.MetricsToken(ctx)
	if err != nil {
		return nil, err
	}
	code, b, err := GetMetrics(ctx, url, token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d: %.200s", url, code, b)
	}
	return b, nil
}
