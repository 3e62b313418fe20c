package lab

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/controlplane"
)

// The workload controllers users run beside onepool, real, from their
// released modules (built by `make tools` from test/tools/<name>):
// LeaderWorkerSet (sigs.k8s.io/lws) and JobSet (sigs.k8s.io/jobset). A
// LeaderWorkerSet or JobSet in the lab makes its StatefulSets or Jobs and
// its pods (labelled by its own pod webhook) as on any cluster. Each runs
// as a process with the admin kubeconfig (a third party's controller, not
// under test), no leader election, and its webhooks served on 127.0.0.1
// with the lab CA's certificate (the one onepool's webhooks use), so the
// lab registers them with a URL instead of its chart's Service: its own
// webhook manifest (config/.../webhook, with its patches: pods only when
// they carry its name label).
type workloadController struct {
	Name        string // the daemon and its binary in .lab/bin
	ConfigGroup string // its Configuration's API group
	WebhookPort int
	ProbePort   int
	// CRD is the file ensureCRDs installs (`make tools` copies it from the module).
	CRD      string
	Webhooks []webhook
}

// webhook is one registration of a workload controller's webhooks.
type webhook struct {
	Name, Path, Group, Version, Resource, Ops string
	Mutating                                  bool
	// Label: only objects that carry it (its patch's objectSelector).
	Label string
}

// Ports of the workload controllers.
const (
	LWSWebhookPort    = 26083
	LWSProbePort      = 26084
	JobSetWebhookPort = 26085
	JobSetProbePort   = 26086
)

var workloadControllers = []workloadController{
	{Name: "lws-controller", ConfigGroup: "config.lws.x-k8s.io", WebhookPort: LWSWebhookPort, ProbePort: LWSProbePort, CRD: "lws-crd.yaml",
		Webhooks: []webhook{
			{"mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "CREATE, UPDATE", true, ""},
			{"mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", "CREATE, UPDATE", true, "leaderworkerset.sigs.k8s.io/name"},
			{"vleaderworkerset.kb.io", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "CREATE, UPDATE", false, ""},
			{"vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", "CREATE, UPDATE", false, "leaderworkerset.sigs.k8s.io/name"},
		}},
	{Name: "jobset-controller", ConfigGroup: "config.jobset.x-k8s.io", WebhookPort: JobSetWebhookPort, ProbePort: JobSetProbePort, CRD: "jobset-crd.yaml",
		Webhooks: []webhook{
			{"mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets", "CREATE", true, ""},
			{"mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", "CREATE", true, "jobset.sigs.k8s.io/jobset-name"},
			{"vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets", "CREATE, UPDATE", false, ""},
			{"vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", "CREATE", false, "jobset.sigs.k8s.io/jobset-name"},
		}},
}

// registration names the lab's webhook configurations of w.
func (w workloadController) registration() string {
	return "onepool-lab-" + strings.TrimSuffix(w.Name, "-controller")
}

func (l *Lab) workloadDaemon(w workloadController) daemon {
	return daemon{
		Name: w.Name,
		Argv: []string{filepath.Join(l.BinDir(), w.Name),
			"--kubeconfig", l.Kubeconfig(), "--config", l.path("run", w.Name+".yaml")},
		Port: w.ProbePort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// workloadConfig is w's Configuration (<group>/v1alpha1, the same shape
// for both).
func (l *Lab) workloadConfig(w workloadController) string {
	return fmt.Sprintf("apiVersion: %s/v1alpha1\nkind: Configuration\n", w.ConfigGroup) + l.managerConfig(w)
}

// managerConfig is the part of a workload controller's Configuration that
// every one of them (LeaderWorkerSet, JobSet, Kueue) shares: no leader
// election, no certificate management of its own, webhooks on 127.0.0.1
// with the lab's certificate, no metrics, probes on w.ProbePort.
func (l *Lab) managerConfig(w workloadController) string {
	return fmt.Sprintf(`leaderElection:
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
`, w.WebhookPort, l.webhookCertDir(), w.ProbePort)
}

// startWorkloadControllers starts each workload controller (its CRD is one
// of ensureCRDs') and registers its webhooks once it serves them.
func (l *Lab) startWorkloadControllers(ctx context.Context) error {
	if err := l.ensureWebhookCert(ctx); err != nil {
		return err
	}
	for _, w := range workloadControllers {
		cfg := l.path("run", w.Name+".yaml")
		old, _ := os.ReadFile(cfg)
		changed := string(old) != l.workloadConfig(w)
		if changed {
			if err := os.WriteFile(cfg, []byte(l.workloadConfig(w)), 0o644); err != nil {
				return err
			}
		}
		d := l.workloadDaemon(w)
		if err := l.startOwn(d, changed, func() error { return l.procs.Stop(d.Name) }); err != nil {
			return err
		}
		if err := l.procs.Await(ctx, d, 60*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
			return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", w.ProbePort))
		}); err != nil {
			return err
		}
		manifest, err := l.webhookManifest(w)
		if err != nil {
			return err
		}
		if err := l.applyManifest(ctx, w.Name+"-webhooks.yaml", manifest); err != nil {
			return err
		}
	}
	return nil
}

// webhookManifest is w's webhook configurations with a URL instead of a
// Service.
func (l *Lab) webhookManifest(w workloadController) (string, error) {
	ca, err := os.ReadFile(l.pki().Path("ca.crt"))
	if err != nil {
		return "", err
	}
	var mutating, validating strings.Builder
	for _, h := range w.Webhooks {
		sel := ""
		if h.Label != "" {
			sel = fmt.Sprintf("\n  objectSelector:\n    matchExpressions:\n    - {key: %s, operator: Exists}", h.Label)
		}
		b := &validating
		if h.Mutating {
			b = &mutating
		}
		fmt.Fprintf(b, `
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
    apiVersions: [%s]
    resources: [%s]%s`, h.Name, w.WebhookPort, h.Path, base64.StdEncoding.EncodeToString(ca), h.Ops, h.Group, h.Version, h.Resource, sel)
	}
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: %[1]s
webhooks:%[2]s
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %[1]s
webhooks:%[3]s
`, w.registration(), mutating.String(), validating.String()), nil
}
