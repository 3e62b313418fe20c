package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/onepool/onepool/gpuwebhook"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The GPU webhook in process mode: the controller manager serves it on
// 127.0.0.1 with a certificate from the lab CA, and the lab registers it
// (the chart does both in chart mode, through a Service).
const (
	ManagerWebhookPort = 26082
	// LabGPUWebhook is the MutatingWebhookConfiguration of process mode,
	// LabTenancyWebhook its ValidatingWebhookConfiguration (TenantPolicy).
	LabGPUWebhook     = "onepool-lab-gpu-webhook"
	LabTenancyWebhook = "onepool-lab-tenancy-webhook"
	// LabelGPUClaims=GPUClaimsDisabled on a namespace keeps its pods out of
	// the webhook (the device-plugin way; kwok nodes publish no devices).
	LabelGPUClaims    = keys.LabelGPUClaims
	GPUClaimsDisabled = keys.GPUClaimsDisabled
)

// webhookCertDir holds tls.crt and tls.key as controller-runtime reads them.
func (l *Lab) webhookCertDir() string { return l.path("run", "webhook-certs") }

// ensureWebhookCert writes the controller manager's serving certificate.
func (l *Lab) ensureWebhookCert(context.Context) error {
	p := l.pki()
	if err := p.EnsureServing("webhook", net.ParseIP("127.0.0.1")); err != nil {
		return err
	}
	if err := os.MkdirAll(l.webhookCertDir(), 0o700); err != nil {
		return err
	}
	for src, dst := range map[string]string{"webhook.crt": "tls.crt", "webhook.key": "tls.key"} {
		if err := copyFile(p.Path(src), filepath.Join(l.webhookCertDir(), dst), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// gpuWebhookConfig is the process mode's registration, the chart's
// (templates/gpu-webhook.yaml) with a URL instead of a Service.
func (l *Lab) gpuWebhookConfig() (string, error) {
	ca, err := os.ReadFile(l.pki().Path("ca.crt"))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: %s
webhooks:
- name: gpus.onepool.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  reinvocationPolicy: IfNeeded
  clientConfig:
    url: https://127.0.0.1:%d%s
    caBundle: %s
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    scope: Namespaced
  namespaceSelector:
    matchExpressions:
    - {key: %s, operator: NotIn, values: [%s]}
  matchConditions:
  - name: onepool-pods
    expression: "object.spec.schedulerName == 'onepool'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %s
webhooks:
- name: tenancy.onepool.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  timeoutSeconds: 5
  clientConfig:
    url: https://127.0.0.1:%d%s
    caBundle: %s
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    scope: Namespaced
  matchConditions:
  - name: onepool-pods
    expression: "object.spec.schedulerName == 'onepool'"
`, LabGPUWebhook, ManagerWebhookPort, gpuwebhook.Path, base64.StdEncoding.EncodeToString(ca), LabelGPUClaims, GPUClaimsDisabled,
		LabTenancyWebhook, ManagerWebhookPort, tenancy.Path, base64.StdEncoding.EncodeToString(ca)), nil
}

// registerGPUWebhook applies the process mode's registration (after the
// controller manager serves it).
func (l *Lab) registerGPUWebhook(ctx context.Context) error {
	cfg, err := l.gpuWebhookConfig()
	if err != nil {
		return err
	}
	return l.applyManifest(ctx, "gpu-webhook.yaml", cfg)
}

// applyManifest writes a manifest the lab makes to run/<name> and applies
// it (server-side, taking over fields a change moved).
func (l *Lab) applyManifest(ctx context.Context, name, manifest string) error {
	f := l.path("run", name)
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		return err
	}
	return rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
		l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "apply", "--server-side", "--force-conflicts", "-f", f)
}

// unregisterGPUWebhook removes the process mode's registration (chart
// mode has the chart's).
func (l *Lab) unregisterGPUWebhook(ctx context.Context) error {
	return rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
		l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "delete", "--ignore-not-found", "mutatingwebhookconfiguration/"+LabGPUWebhook, "validatingwebhookconfiguration/"+LabTenancyWebhook)
}
