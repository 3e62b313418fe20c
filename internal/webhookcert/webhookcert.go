// Package webhookcert keeps the controller manager's webhook serving
// certificate: made in the cluster (a Secret every replica shares), not by
// the chart, rotated before it expires, written where the webhook server
// reads it, and its CA kept in the webhook configurations' caBundle. A
// chart that made the certificate would make a new one at every `helm
// template` (GitOps) and keep it ten years.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The Secret's keys: the serving pair, the CA that signed it (with its
// key, to sign the next one) and the CA before it, still trusted until it
// expires so that a rotation never refuses a request in flight.
const (
	KeyCert       = "tls.crt"
	KeyKey        = "tls.key"
	KeyCA         = "ca.crt"
	KeyCAKey      = "ca.key"
	KeyPreviousCA = "ca-previous.crt"
)

// Leaf is one more serving certificate the CA signs, for another
// component's Service (the scheduler's metrics): the Secret holds it under
// <Key>.crt and <Key>.key, and that component's pod mounts those two keys
// only (not the CA's key, nor the webhook's).
type Leaf struct {
	Key      string
	Services []types.NamespacedName
}

// CertKey and KeyKey are the Secret's keys of l's pair.
func (l Leaf) CertKey() string { return l.Key + ".crt" }
func (l Leaf) KeyKey() string  { return l.Key + ".key" }

// Webhook names a webhook configuration whose every webhook's caBundle is
// kept to the CA.
type Webhook struct {
	Validating bool // a ValidatingWebhookConfiguration, else a Mutating one
	Name       string
}

// Config of a Manager.
type Config struct {
	Client  kubernetes.Interface
	Secret  types.NamespacedName // where the certificate lives
	Service types.NamespacedName // the webhook Service: the certificate's DNS names
	// ExtraServices are other Services of the same pods the certificate
	// also names (the metrics Service, so scrapers can verify it).
	ExtraServices []types.NamespacedName
	// Leaves are serving certificates of other components, signed by the
	// same CA, so a scraper verifies them with the Secret's ca.crt.
	Leaves   []Leaf
	CertDir  string // tls.crt and tls.key for the webhook server
	Webhooks []Webhook
	// Validity of a serving certificate (default a year) and of a CA
	// (default ten years); each is made again when less than a third of
	// its validity is left.
	Validity, CAValidity time.Duration
	Now                  func() time.Time
	Log                  logr.Logger
}

var leafKey = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Manager keeps the certificate; see Ensure and Run.
type Manager struct{ c Config }

// New checks cfg and fills its defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil || cfg.Secret.Name == "" || cfg.Secret.Namespace == "" || cfg.Service.Name == "" || cfg.Service.Namespace == "" || cfg.CertDir == "" {
		return nil, errors.New("webhookcert: client, secret, service and cert dir are required")
	}
	for _, l := range cfg.Leaves {
		if !leafKey.MatchString(l.Key) || l.Key == "tls" || l.Key == "ca" || len(l.Services) == 0 {
			return nil, fmt.Errorf("webhookcert: leaf %q: a key of [a-z0-9-] other than tls and ca, and a Service, are required", l.Key)
		}
	}
	if cfg.Validity <= 0 {
		cfg.Validity = 365 * 24 * time.Hour
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{c: cfg}, nil
}

// DNSNames are the names the API server may dial the Service by, then
// those of the extra Services.
func (m *Manager) DNSNames() []string {
	return dnsNames(append([]types.NamespacedName{m.c.Service}, m.c.ExtraServices...))
}

// dnsNames are the names a pod reaches services by.
func dnsNames(services []types.NamespacedName) []string {
	var out []string
	for _, s := range services {
		out = append(out, s.Name, s.Name+"."+s.Namespace, s.Name+"."+s.Namespace+".svc", s.Name+"."+s.Namespace+".svc.cluster.local")
	}
	return out
}

// Ensure makes or rotates the certificate in the Secret as needed (one
// replica wins a race; the others read its result), writes the serving
// pair to the cert dir and keeps the caBundles. Errors never carry a key.
func (m *Manager) Ensure(ctx context.Context) error {
	data, err := m.ensureSecret(ctx)
	if err != nil {
		return err
	}
	if err := m.writeFiles(data); err != nil {
		return err
	}
	return m.patchBundles(ctx, caBundle(data))
}

// Run calls Ensure every interval until ctx ends: rotations happen here,
// and a rotation by another replica reaches this one's files. A failure is
// logged and tried again at the next tick.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := m.Ensure(cctx); err != nil {
				m.c.Log.Error(err, "webhook certificate", "secret", m.c.Secret.String())
			}
			cancel()
		}
	}
}

func (m *Manager) ensureSecret(ctx context.Context) (map[string][]byte, error) {
	secrets := m.c.Client.CoreV1().Secrets(m.c.Secret.Namespace)
	for try := 0; try < 5; try++ {
		s, err := secrets.Get(ctx, m.c.Secret.Name, metav1.GetOptions{})
		missing := apierrors.IsNotFound(err)
		if err != nil && !missing {
			return nil, fmt.Errorf("webhook certificate Secret %s: %w", m.c.Secret, err)
		}
		var have map[string][]byte
		if !missing {
			have = s.Data
		}
		next, why, err := m.next(have)
		if err != nil {
			return nil, err
		}
		if why == "" {
			return have, nil
		}
		if missing {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.c.Secret.Name, Namespace: m.c.Secret.Namespace,
				Labels: map[string]string{"app.kubernetes.io/part-of": "onepool"}}, Type: corev1.SecretTypeTLS, Data: next}
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		} else {
			s.Data = next
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica wrote it: read theirs
		}
		if err != nil {
			return nil, fmt.Errorf("webhook certificate Secret %s: %w", m.c.Secret, err)
		}
		m.c.Log.Info("webhook certificate made", "secret", m.c.Secret.String(), "why", why)
		return next, nil
	}
	return nil, fmt.Errorf("webhook certificate Secret %s: changed under us five times", m.c.Secret)
}

// next is what the Secret should hold, and why it changes ("" it need
// not: have is kept as it is).
func (m *Manager) next(have map[string][]byte) (map[string][]byte, string, error) {
	now := m.c.Now()
	ca, caKey, caErr := parsePair(have[KeyCA], have[KeyCAKey])
	out := map[string][]byte{}
	caWhy := ""
	switch {
	case caErr != nil:
		caWhy = "no usable CA (" + caErr.Error() + ")"
	case nearEnd(ca, now, m.c.CAValidity):
		caWhy = "the CA expires " + ca.NotAfter.UTC().Format(time.RFC3339)
		out[KeyPreviousCA] = have[KeyCA]
	}
	var whys []string
	if caWhy != "" {
		whys = append(whys, caWhy)
		var err error
		if ca, caKey, err = newCA(now, m.c.CAValidity); err != nil {
			return nil, "", err
		}
		out[KeyCA], out[KeyCAKey] = encodeCert(ca), encodeKey(caKey)
	} else {
		out[KeyCA], out[KeyCAKey] = have[KeyCA], have[KeyCAKey]
		if prev, err := parseCert(have[KeyPreviousCA]); err == nil && now.Before(prev.NotAfter) {
			out[KeyPreviousCA] = have[KeyPreviousCA]
		}
	}
	// The webhook's pair, then each leaf's: kept while good, else made.
	pairs := append([]Leaf{{}}, m.c.Leaves...)
	for _, l := range pairs {
		certKey, keyKey, names, what := KeyCert, KeyKey, m.DNSNames(), "the serving certificate"
		if l.Key != "" {
			certKey, keyKey, names, what = l.CertKey(), l.KeyKey(), dnsNames(l.Services), "the "+l.Key+" certificate"
		}
		if caWhy == "" {
			why := m.stale(have[certKey], have[keyKey], ca, now, names, what)
			if why == "" {
				out[certKey], out[keyKey] = have[certKey], have[keyKey]
				continue
			}
			whys = append(whys, why)
		}
		cert, key, err := newServing(now, m.c.Validity, names, ca, caKey)
		if err != nil {
			return nil, "", err
		}
		out[certKey], out[keyKey] = encodeCert(cert), encodeKey(key)
	}
	if len(whys) == 0 {
		return have, "", nil
	}
	return out, strings.Join(whys, "; "), nil
}

// stale says why a serving pair must be made again ("" it is good): what
// names it in the reason.
func (m *Manager) stale(certPEM, keyPEM []byte, ca *x509.Certificate, now time.Time, names []string, what string) string {
	cert, _, err := parsePair(certPEM, keyPEM)
	switch {
	case err != nil:
		return "no usable " + strings.TrimPrefix(what, "the ") + " (" + err.Error() + ")"
	case cert.CheckSignatureFrom(ca) != nil:
		return what + " is not the CA's"
	case nearEnd(cert, now, m.c.Validity):
		return what + " expires " + cert.NotAfter.UTC().Format(time.RFC3339)
	case !slices.Equal(cert.DNSNames, names):
		return "the Service's names changed"
	}
	return ""
}

// nearEnd: less than a third of validity left (or not valid yet).
func nearEnd(c *x509.Certificate, now time.Time, validity time.Duration) bool {
	return now.Before(c.NotBefore) || c.NotAfter.Sub(now) < validity/3
}

func caBundle(data map[string][]byte) []byte {
	return append(append([]byte{}, data[KeyCA]...), data[KeyPreviousCA]...)
}

func (m *Manager) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(m.c.CertDir, 0o700); err != nil {
		return fmt.Errorf("webhook cert dir: %w", err)
	}
	for _, k := range []string{KeyKey, KeyCert} { // the key first: a reader of a new cert finds its key
		p := filepath.Join(m.c.CertDir, k)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data[k]) {
			continue
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, data[k], 0o600); err != nil {
			return fmt.Errorf("webhook cert dir: %w", err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return fmt.Errorf("webhook cert dir: %w", err)
		}
	}
	return nil
}

func (m *Manager) patchBundles(ctx context.Context, bundle []byte) error {
	adm := m.c.Client.AdmissionregistrationV1()
	for _, w := range m.c.Webhooks {
		var err error
		if w.Validating {
			var cfg *admissionv1.ValidatingWebhookConfiguration
			if cfg, err = adm.ValidatingWebhookConfigurations().Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
				changed := false
				for i := range cfg.Webhooks {
					changed = setBundle(&cfg.Webhooks[i].ClientConfig, bundle) || changed
				}
				if changed {
					_, err = adm.ValidatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
				}
			}
		} else {
			var cfg *admissionv1.MutatingWebhookConfiguration
			if cfg, err = adm.MutatingWebhookConfigurations().Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
				changed := false
				for i := range cfg.Webhooks {
					changed = setBundle(&cfg.Webhooks[i].ClientConfig, bundle) || changed
				}
				if changed {
					_, err = adm.MutatingWebhookConfigurations().Update(ctx, cfg, metav1.UpdateOptions{})
				}
			}
		}
		if err != nil {
			return fmt.Errorf("caBundle of webhook configuration %s: %w", w.Name, err)
		}
	}
	return nil
}

// setBundle sets c's caBundle and says whether it was different.
func setBundle(c *admissionv1.WebhookClientConfig, bundle []byte) bool {
	if bytes.Equal(c.CABundle, bundle) {
		return false
	}
	c.CABundle = bundle
	return true
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "onepool webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	return sign(tmpl, nil, nil)
}

func newServing(now time.Time, validity time.Duration, names []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: names[min(2, len(names)-1)]}, DNSNames: names, // the webhook's <name>.<ns>.svc
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	return sign(tmpl, ca, caKey)
}

// sign makes a key and signs tmpl with parent's key (itself when nil).
func sign(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("webhook certificate: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook certificate: %w", err)
	}
	return cert, key, nil
}

func encodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func encodeKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k) // a key this package made always marshals
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// parsePair reads a certificate and its EC key and checks they belong
// together. Its errors say what is wrong, never what a key holds.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil || !strings.HasSuffix(block.Type, "PRIVATE KEY") {
		return nil, nil, errors.New("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, errors.New("the key does not parse")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, errors.New("the key is not the certificate's")
	}
	return cert, key, nil
}
