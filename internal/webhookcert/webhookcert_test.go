package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

type fixture struct {
	kc  *fake.Clientset
	now time.Time
	dir string
	m   *Manager
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), dir: t.TempDir()}
	f.kc = fake.NewClientset(
		&admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gpus"},
			Webhooks: []admissionv1.MutatingWebhook{{Name: "gpus.onepool.dev"}}},
		&admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tenancy"},
			Webhooks: []admissionv1.ValidatingWebhook{{Name: "tenancy.onepool.dev"}, {Name: "other.onepool.dev"}}})
	f.m = f.manager(t, f.dir)
	return f
}

func (f *fixture) manager(t *testing.T, dir string) *Manager {
	m, err := New(Config{Client: f.kc, Secret: types.NamespacedName{Namespace: "onepool-system", Name: "webhook-tls"},
		Service: types.NamespacedName{Namespace: "onepool-system", Name: "onepool-webhook"}, CertDir: dir,
		Webhooks: []Webhook{{Name: "gpus"}, {Validating: true, Name: "tenancy"}}, Now: func() time.Time { return f.now }, Log: logr.Discard()})
	require.NoError(t, err)
	return m
}

func (f *fixture) secret(t *testing.T) map[string][]byte {
	s, err := f.kc.CoreV1().Secrets("onepool-system").Get(context.Background(), "webhook-tls", metav1.GetOptions{})
	require.NoError(t, err)
	return s.Data
}

// What the API server would check when it calls the webhook: the
// serving pair in the cert dir verifies against every caBundle, for the
// Service's name, at time at.
func (f *fixture) apiServerTrusts(t *testing.T, at time.Time) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(f.dir, "tls.crt"), filepath.Join(f.dir, "tls.key"))
	require.NoError(t, err, "the webhook server cannot load its files")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	ctx := context.Background()
	mw, err := f.kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gpus", metav1.GetOptions{})
	require.NoError(t, err)
	vw, err := f.kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tenancy", metav1.GetOptions{})
	require.NoError(t, err)
	bundles := [][]byte{mw.Webhooks[0].ClientConfig.CABundle, vw.Webhooks[0].ClientConfig.CABundle, vw.Webhooks[1].ClientConfig.CABundle}
	for _, b := range bundles {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(b), "an empty caBundle")
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "onepool-webhook.onepool-system.svc", CurrentTime: at})
		assert.NoError(t, err)
	}
}

func TestEnsureMakesTheCertificateOnce(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.m.Ensure(context.Background()))
	f.apiServerTrusts(t, f.now)
	first := f.secret(t)
	info, err := os.Stat(filepath.Join(f.dir, "tls.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	// A second replica, or this one a day later: nothing changes.
	f.now = f.now.Add(24 * time.Hour)
	other := t.TempDir()
	require.NoError(t, f.manager(t, other).Ensure(context.Background()))
	require.NoError(t, f.m.Ensure(context.Background()))
	assert.Equal(t, first, f.secret(t))
	b, err := os.ReadFile(filepath.Join(other, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, first[KeyCert], b, "the second replica serves the same certificate")
}

func TestEnsureRotatesBeforeExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.m.Ensure(ctx))
	first := f.secret(t)

	// Eight months on, a third of the year is left: a new serving pair
	// from the same CA.
	f.now = f.now.Add(245 * 24 * time.Hour)
	require.NoError(t, f.m.Ensure(ctx))
	second := f.secret(t)
	assert.NotEqual(t, first[KeyCert], second[KeyCert])
	assert.Equal(t, first[KeyCA], second[KeyCA])
	f.apiServerTrusts(t, f.now.Add(300*24*time.Hour)) // still good long after the old one's end

	// Seven years on, the CA is made again; the old CA stays in the
	// bundle until it expires (a request in flight is not refused).
	f.now = f.now.Add(7 * 365 * 24 * time.Hour)
	require.NoError(t, f.m.Ensure(ctx))
	third := f.secret(t)
	assert.NotEqual(t, second[KeyCA], third[KeyCA])
	assert.Equal(t, second[KeyCA], third[KeyPreviousCA])
	mw, err := f.kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gpus", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, append(append([]byte{}, third[KeyCA]...), third[KeyPreviousCA]...), mw.Webhooks[0].ClientConfig.CABundle)
	f.apiServerTrusts(t, f.now)
}

// What another tool or a person left in the Secret is replaced when it
// cannot serve: garbage, a key of another certificate, another Service's
// names.
func TestEnsureReplacesWhatCannotServe(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		spoil func(d map[string][]byte, f *fixture)
	}{
		{"garbage", func(d map[string][]byte, _ *fixture) { d[KeyCert] = []byte("not a certificate") }},
		{"a key of another certificate", func(d map[string][]byte, _ *fixture) { d[KeyKey] = d[KeyCAKey] }},
		{"another Service's names", func(d map[string][]byte, f *fixture) {
			f.m.c.Service.Name = "renamed"
		}},
		{"no CA", func(d map[string][]byte, _ *fixture) { delete(d, KeyCA) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			require.NoError(t, f.m.Ensure(ctx))
			s, err := f.kc.CoreV1().Secrets("onepool-system").Get(ctx, "webhook-tls", metav1.GetOptions{})
			require.NoError(t, err)
			tc.spoil(s.Data, f)
			_, err = f.kc.CoreV1().Secrets("onepool-system").Update(ctx, s, metav1.UpdateOptions{})
			require.NoError(t, err)
			require.NoError(t, f.m.Ensure(ctx))
			pair, err := tls.LoadX509KeyPair(filepath.Join(f.dir, "tls.crt"), filepath.Join(f.dir, "tls.key"))
			require.NoError(t, err)
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			require.NoError(t, err)
			assert.Equal(t, f.m.DNSNames(), leaf.DNSNames)
		})
	}
}

// A missing webhook configuration is an error naming it (the chart did not
// install it, or RBAC): the files are still written, the server can start.
func TestEnsureNamesAMissingConfiguration(t *testing.T) {
	f := newFixture(t)
	f.m.c.Webhooks = append(f.m.c.Webhooks, Webhook{Name: "absent"})
	err := f.m.Ensure(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "webhook configuration absent")
	assert.NotContains(t, err.Error(), "PRIVATE")
	_, statErr := os.Stat(filepath.Join(f.dir, "tls.crt"))
	assert.NoError(t, statErr)
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	_, err := New(Config{Client: fake.NewClientset()})
	assert.Error(t, err)
}

// An upgrade that names the metrics Service too: the next Ensure issues a
// certificate (same CA) that a scraper verifies with the Secret's ca.crt
// for the metrics Service's name, and the webhook's name still verifies.
func TestEnsureNamesTheExtraServices(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.m.Ensure(ctx))
	before := f.secret(t)
	m, err := New(Config{Client: f.kc, Secret: types.NamespacedName{Namespace: "onepool-system", Name: "webhook-tls"},
		Service:       types.NamespacedName{Namespace: "onepool-system", Name: "onepool-webhook"},
		ExtraServices: []types.NamespacedName{{Namespace: "onepool-system", Name: "onepool-metrics"}}, CertDir: f.dir,
		Webhooks: []Webhook{{Name: "gpus"}, {Validating: true, Name: "tenancy"}}, Now: func() time.Time { return f.now }, Log: logr.Discard()})
	require.NoError(t, err)
	require.NoError(t, m.Ensure(ctx))
	after := f.secret(t)
	assert.Equal(t, before[KeyCA], after[KeyCA], "the CA stays")
	assert.NotEqual(t, before[KeyCert], after[KeyCert], "a certificate with the new names")
	f.apiServerTrusts(t, f.now)

	pair, err := tls.LoadX509KeyPair(filepath.Join(f.dir, "tls.crt"), filepath.Join(f.dir, "tls.key"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(after[KeyCA]))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "onepool-metrics.onepool-system.svc", CurrentTime: f.now})
	assert.NoError(t, err)
	assert.Equal(t, "onepool-webhook.onepool-system.svc", leaf.Subject.CommonName)
}

// A leaf for the scheduler's metrics Service: an upgrade that asks for it
// keeps the CA and the webhook's pair, adds the leaf (verified with ca.crt
// for the scheduler's name only), keeps it while good, and makes it again
// when it nears its end and when the CA is replaced.
func TestEnsureKeepsALeafForAnotherComponent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.m.Ensure(ctx))
	before := f.secret(t)
	leafCfg := Leaf{Key: "scheduler-metrics", Services: []types.NamespacedName{{Namespace: "onepool-system", Name: "onepool-scheduler-metrics"}}}
	m, err := New(Config{Client: f.kc, Secret: types.NamespacedName{Namespace: "onepool-system", Name: "webhook-tls"},
		Service: types.NamespacedName{Namespace: "onepool-system", Name: "onepool-webhook"}, Leaves: []Leaf{leafCfg}, CertDir: f.dir,
		Webhooks: []Webhook{{Name: "gpus"}, {Validating: true, Name: "tenancy"}}, Now: func() time.Time { return f.now }, Log: logr.Discard()})
	require.NoError(t, err)
	verify := func(data map[string][]byte, name string, at time.Time) error {
		pair, err := tls.X509KeyPair(data[leafCfg.CertKey()], data[leafCfg.KeyKey()])
		require.NoError(t, err, "the leaf's key is its certificate's")
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(data[KeyCA]))
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at})
		return err
	}

	require.NoError(t, m.Ensure(ctx))
	added := f.secret(t)
	assert.Equal(t, before[KeyCA], added[KeyCA], "the CA stays")
	assert.Equal(t, before[KeyCert], added[KeyCert], "the webhook's pair stays")
	assert.NoError(t, verify(added, "onepool-scheduler-metrics.onepool-system.svc", f.now))
	assert.Error(t, verify(added, "onepool-webhook.onepool-system.svc", f.now), "the leaf is not the webhook's")
	f.apiServerTrusts(t, f.now)

	require.NoError(t, m.Ensure(ctx))
	assert.Equal(t, added, f.secret(t), "a good leaf is kept")

	f.now = f.now.Add(300 * 24 * time.Hour)
	require.NoError(t, m.Ensure(ctx))
	renewed := f.secret(t)
	assert.Equal(t, added[KeyCA], renewed[KeyCA])
	assert.NotEqual(t, added[leafCfg.CertKey()], renewed[leafCfg.CertKey()], "a leaf near its end is made again")
	assert.NoError(t, verify(renewed, "onepool-scheduler-metrics.onepool-system.svc", f.now))

	f.now = f.now.Add(9 * 365 * 24 * time.Hour)
	require.NoError(t, m.Ensure(ctx))
	rotated := f.secret(t)
	assert.NotEqual(t, renewed[KeyCA], rotated[KeyCA], "the CA near its end is replaced")
	assert.NoError(t, verify(rotated, "onepool-scheduler-metrics.onepool-system.svc", f.now), "the leaf is the new CA's")
}

func TestNewRefusesABadLeaf(t *testing.T) {
	for _, l := range []Leaf{
		{Key: "", Services: []types.NamespacedName{{Namespace: "a", Name: "b"}}},
		{Key: "tls", Services: []types.NamespacedName{{Namespace: "a", Name: "b"}}},
		{Key: "Sched/uler", Services: []types.NamespacedName{{Namespace: "a", Name: "b"}}},
		{Key: "scheduler"},
	} {
		_, err := New(Config{Client: fake.NewClientset(), Secret: types.NamespacedName{Namespace: "a", Name: "s"},
			Service: types.NamespacedName{Namespace: "a", Name: "w"}, CertDir: "/tmp/x", Leaves: []Leaf{l}})
		assert.Error(t, err, "leaf %+v", l)
	}
}
