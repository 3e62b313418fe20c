package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/onepool/onepool/internal/webhookcert"
)

// webhookCertFlags: with --webhook-cert-secret the manager keeps its own
// serving certificate (internal/webhookcert); without, the cert dir's
// files come from elsewhere (cert-manager, the lab).
type webhookCertFlags struct {
	secret, service, configurations string
}

func (f webhookCertFlags) enabled() bool { return f.secret != "" }

func parseName(flag, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--%s %q: want namespace/name", flag, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// config checks the flags and makes the certificate manager's config
// (without its client).
func (f webhookCertFlags) config(certDir string) (webhookcert.Config, error) {
	c := webhookcert.Config{CertDir: certDir, Log: ctrl.Log.WithName("webhook-cert")}
	var err error
	if c.Secret, err = parseName("webhook-cert-secret", f.secret); err != nil {
		return c, err
	}
	if c.Service, err = parseName("webhook-service", f.service); err != nil {
		return c, err
	}
	for _, w := range strings.Split(f.configurations, ",") {
		if w == "" {
			continue
		}
		kind, name, ok := strings.Cut(w, "/")
		if !ok || name == "" || (kind != "mutating" && kind != "validating") {
			return c, fmt.Errorf("--webhook-configurations %q: want mutating/NAME or validating/NAME", w)
		}
		c.Webhooks = append(c.Webhooks, webhookcert.Webhook{Validating: kind == "validating", Name: name})
	}
	return c, nil
}

// startWebhookCert makes sure the serving certificate is in the cert dir
// before the webhook server starts (it reads the files at start), and
// returns what keeps it afterwards, on every replica: the API server may
// call any of them.
func startWebhookCert(ctx context.Context, rc *rest.Config, cfg webhookcert.Config) (func(context.Context) error, error) {
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cfg.Client = kc
	m, err := webhookcert.New(cfg)
	if err != nil {
		return nil, err
	}
	// A few tries: at a first install the webhook configurations may come
	// a moment after this pod. Without its files the server cannot start.
	var last error
	for try := 0; try < 5; try++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		last = m.Ensure(cctx)
		cancel()
		if last == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	if last != nil {
		if _, err := os.Stat(filepath.Join(cfg.CertDir, webhookcert.KeyCert)); err != nil {
			return nil, fmt.Errorf("webhook certificate: %w", last)
		}
		cfg.Log.Error(last, "webhook certificate: serving the files written, will try again")
	}
	return func(ctx context.Context) error {
		m.Run(ctx, 5*time.Minute)
		return nil
	}, nil
}

// everyReplica is a runnable that runs without the leader lease.
type everyReplica func(context.Context) error

func (r everyReplica) Start(ctx context.Context) error { return r(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
