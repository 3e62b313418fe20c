package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"time"
)

// LoadCA reads the lab CA that ensure made.
func (p PKI) LoadCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(p.Path("ca.crt"))
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(p.Path("ca.key"))
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, errors.New("lab CA: bad PEM")
	}
	ca, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

// EnsureClient issues NAME.crt/NAME.key, a client certificate for user cn in
// groups orgs, signed by the lab CA, unless it exists.
func (p PKI) EnsureClient(name, cn string, orgs []string) error {
	if _, err := os.Stat(p.Path(name + ".crt")); err == nil {
		return nil
	}
	ca, caKey, err := p.LoadCA()
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now, NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return p.WritePair(name, der, key)
}

// ClientKubeconfig is a kubeconfig for server with the client pair NAME.
func (p PKI) ClientKubeconfig(server, name string) (string, error) {
	read := func(n string) (string, error) {
		b, err := os.ReadFile(p.Path(n))
		return string(b), err
	}
	ca, err1 := read("ca.crt")
	crt, err2 := read(name + ".crt")
	key, err3 := read(name + ".key")
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", err
	}
	return KubeconfigFor(server, []byte(ca), name, "",
		[2]string{"client-certificate-data", base64Std(crt)}, [2]string{"client-key-data", base64Std(key)}), nil
}
