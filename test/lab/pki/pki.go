package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PKI is the lab's small certificate authority: a CA, the apiserver's
// serving certificate, an admin client certificate (system:masters) and the
// service-account signing key. Made once, kept under run/pki.
type PKI struct{ Dir string }

func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

func (p PKI) Ensure() error {
	if _, err := os.Stat(p.Path("admin.crt")); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "onepool-lab-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	issue := func(name string, serial int64, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now, now.Add(10*365*24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return p.WritePair(name, der, key)
	}
	errs := []error{
		p.WritePair("ca", caDER, caKey),
		issue("apiserver", 2, &x509.Certificate{
			Subject: pkix.Name{CommonName: "kube-apiserver"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		}),
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	errs = append(errs,
		os.WriteFile(p.Path("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600),
		os.WriteFile(p.Path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644),
		// admin.crt last: its presence says the set is complete.
		issue("admin", 3, &x509.Certificate{
			Subject: pkix.Name{CommonName: "onepool-admin", Organization: []string{"system:masters"}}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}),
	)
	return errors.Join(errs...)
}

func (p PKI) WritePair(name string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.Path(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.Path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func (p PKI) Kubeconfig(server string) (string, error) { return p.ClientKubeconfig(server, "admin") }

// KubeconfigFor is a kubeconfig for the lab's apiserver whose user
// authenticates with creds (client-certificate-data and client-key-data,
// or token); namespace may be empty.
func KubeconfigFor(server string, caPEM []byte, user, namespace string, creds ...[2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\nclusters:\n- name: onepool-lab\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n", server, base64Std(string(caPEM)))
	fmt.Fprintf(&b, "users:\n- name: %s\n  user:\n", user)
	for _, c := range creds {
		fmt.Fprintf(&b, "    %s: %s\n", c[0], c[1])
	}
	ns := ""
	if namespace != "" {
		ns = ", namespace: " + namespace
	}
	fmt.Fprintf(&b, "contexts:\n- name: onepool-lab\n  context: {cluster: onepool-lab, user: %s%s}\ncurrent-context: onepool-lab\n", user, ns)
	return b.String()
}

// EnsureServing issues name.crt/name.key, a serving certificate for ips
// signed by the lab CA, unless it exists.
func (p PKI) EnsureServing(name string, ips ...net.IP) error {
	if _, err := os.Stat(p.Path(name + ".crt")); err == nil {
		return nil
	}
	caPair, err := tls.LoadX509KeyPair(p.Path("ca.crt"), p.Path("ca.key"))
	if err != nil {
		return fmt.Errorf("lab CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		return err
	}
	return p.WritePair(name, der, key)
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
