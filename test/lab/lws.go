package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/onepool/onepool/test/lab/controlplane"
)

// LeaderWorkerSet's controller (sigs.k8s.io/lws, its released module built
// by `make tools` from test/tools/lws): real, so a LeaderWorkerSet in the
// lab makes its leader StatefulSet, its pods (labelled by its own pod
// webhook) and each group's worker StatefulSet as on any cluster. It runs
// as a process with the admin kubeconfig (a third party's controller, not
// under test), no leader election, and its webhooks served on 127.0.0.1
// with the lab CA's certificate (the one onepool's webhooks use), so the
// lab registers them with a URL instead of its chart's Service.
const (
	LWSWebhookPort = 26083
	LWSProbePort   = 26084
	// LWSWebhooks names the lab's registrations of its webhooks.
	LWSWebhooks = "onepool-lab-lws"
)

func (l *Lab) lwsController() daemon {
	return daemon{
		Name: "lws-controller",
		Argv: []string{filepath.Join(l.BinDir(), "lws-controller"),
			"--kubeconfig", l.Kubeconfig(), "--config", l.path("run", "lws-config.yaml")},
		Port: LWSProbePort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// lwsConfig is its Configuration (config.lws.x-k8s.io/v1alpha1).
func (l *Lab) lwsConfig() string {
	return fmt.Sprintf(`apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:%d
`, LWSWebhookPort, l.webhookCertDir(), LWSProbePort)
}

// startLWS starts the LeaderWorkerSet controller (its CRD is one of
// ensureCRDs') and registers its webhooks once it serves them.
func (l *Lab) startLWS(ctx context.Context) error {
	if err := l.ensureWebhookCert(ctx); err != nil {
		return err
	}
	cfg := l.path("run", "lws-config.yaml")
	old, _ := os.ReadFile(cfg)
	changed := string(old) != l.lwsConfig()
	if changed {
		if err := os.WriteFile(cfg, []byte(l.lwsConfig()), 0o644); err != nil {
			return err
		}
	}
	d := l.lwsController()
	if err := l.startOwn(d, changed, func() error { return l.procs.Stop(d.Name) }); err != nil {
		return err
	}
	if err := l.procs.Await(ctx, d, 60*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", LWSProbePort))
	}); err != nil {
		return err
	}
	return l.registerLWSWebhooks(ctx)
}

// lwsWebhookConfig is LeaderWorkerSet's own webhook manifest
// (config/webhook, with its patches: pods only when they carry its name
// label) with a URL instead of a Service.
func (l *Lab) lwsWebhookConfig() (string, error) {
	ca, err := os.ReadFile(l.pki().Path("ca.crt"))
	if err != nil {
		return "", err
	}
	hook := func(name, path, group, resource, ops string, podsOnly bool) string {
		sel := ""
		if podsOnly {
			sel = "\n  objectSelector:\n    matchExpressions:\n    - {key: leaderworkerset.sigs.k8s.io/name, operator: Exists}"
		}
		return fmt.Sprintf(`
- name: %s
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 10
  clientConfig:
    url: https://127.0.0.1:%d%s
    caBundle: %s
  rules:
  - operations: [%s]
    apiGroups: ["%s"]
    apiVersions: [v1]
    resources: [%s]%s`, name, LWSWebhookPort, path, base64.StdEncoding.EncodeToString(ca), ops, group, resource, sel)
	}
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: %[1]s
webhooks:%[2]s%[3]s
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %[1]s
webhooks:%[4]s%[5]s
`, LWSWebhooks,
		hook("mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "leaderworkerset.x-k8s.io", "leaderworkersets", "CREATE, UPDATE", false),
		hook("mpod.kb.io", "/mutate--v1-pod", "", "pods", "CREATE, UPDATE", true),
		hook("vleaderworkerset.kb.io", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "leaderworkerset.x-k8s.io", "leaderworkersets", "CREATE, UPDATE", false),
		hook("vpod.kb.io", "/validate--v1-pod", "", "pods", "CREATE, UPDATE", true)), nil
}

func (l *Lab) registerLWSWebhooks(ctx context.Context) error {
	cfg, err := l.lwsWebhookConfig()
	if err != nil {
		return err
	}
	return l.applyManifest(ctx, "lws-webhooks.yaml", cfg)
}
