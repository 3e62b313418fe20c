package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// Kueue (sigs.k8s.io/kueue), real, from its released module: `make kueue`
// builds .lab/bin/kueue-controller from test/tools/kueue and copies its
// CRDs. Unlike LeaderWorkerSet and JobSet it is not part of every lab: the
// Kueue suite starts it (StartKueue) and stops it when done (StopKueue),
// so no other suite's Jobs meet its webhooks. It runs as the workload
// controllers do (a process, the admin kubeconfig, no leader election,
// its webhooks on 127.0.0.1 with the lab CA's certificate, registered by
// URL), with two differences:
//   - Only Jobs in a LocalQueue (label kueue.x-k8s.io/queue-name) go
//     through its Job webhooks: upstream sends every Job, and ignores those
//     without the label.
//   - Without its internal certificate management, Kueue 0.17 reads a
//     metrics certificate from /etc/kueue/metrics/certs (a path it hard-
//     codes, even with metrics off). The lab does not write into the
//     host's /etc: the controller runs in a mount namespace of its own
//     where /etc is an overlay whose upper layer (.lab/run/kueue-etc) holds
//     that certificate.
var kueueController = workloadController{
	Name: "kueue-controller", WebhookPort: KueueWebhookPort, ProbePort: KueueProbePort, CRD: "kueue-crds.yaml",
	Webhooks: []webhook{
		{"mjob.kb.io", "/mutate-batch-v1-job", "batch", "v1", "jobs", "CREATE", true, kueueQueueLabel},
		{"vjob.kb.io", "/validate-batch-v1-job", "batch", "v1", "jobs", "CREATE, UPDATE", false, kueueQueueLabel},
		{"mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", "CREATE", true, ""},
		{"vclusterqueue.kb.io", "/validate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", "CREATE, UPDATE", false, ""},
		{"mresourceflavor.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors", "CREATE", true, ""},
		{"vresourceflavor.kb.io", "/validate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors", "CREATE, UPDATE", false, ""},
		{"mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2", "workloads", "CREATE", true, ""},
		{"vworkload.kb.io", "/validate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2", "workloads, workloads/status", "CREATE, UPDATE", false, ""},
	},
}

// kueueQueueLabel names a Job's LocalQueue.
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

// Ports of Kueue's webhooks and probes.
const (
	KueueWebhookPort = 26087
	KueueProbePort   = 26088
)

// ErrKueueNotBuilt means `make kueue` has not run in this lab.
var ErrKueueNotBuilt = errors.New("Kueue is not built: run `make kueue`")

func (l *Lab) kueueDir() string { return l.path("run", "kueue-etc") }

func (l *Lab) kueueConfig() string {
	return `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kube-system
manageJobsWithoutQueueName: false
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
` + l.managerConfig(kueueController)
}

func (l *Lab) kueueDaemon() (daemon, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return daemon{}, fmt.Errorf("Kueue's mount namespace: %w", err)
	}
	w := kueueController
	return daemon{
		Name: w.Name,
		// The overlay's layers are named in "$0" (the folder), so the
		// script holds no path of its own.
		Argv: []string{unshare, "--mount", "--propagation", "private", "/bin/sh", "-c",
			`mount -t overlay overlay -o "lowerdir=/etc,upperdir=$0/upper,workdir=$0/work" /etc && exec "$@"`,
			l.kueueDir(), filepath.Join(l.BinDir(), w.Name),
			"--kubeconfig", l.Kubeconfig(), "--config", l.path("run", w.Name+".yaml")},
		Program: w.Name,
		Port:    w.ProbePort,
		Env:     []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + l.path("run")},
	}, nil
}

// StartKueue installs Kueue's CRDs, starts its controller and registers
// its webhooks once it serves them. ErrKueueNotBuilt when `make kueue`
// has not run.
func (l *Lab) StartKueue(ctx context.Context) error {
	w := kueueController
	if _, err := os.Stat(filepath.Join(l.BinDir(), w.Name)); err != nil {
		return ErrKueueNotBuilt
	}
	crds := l.path(w.CRD)
	if _, err := os.Stat(crds); err != nil {
		return ErrKueueNotBuilt
	}
	kubectl := func(args ...string) error {
		return rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
			append([]string{l.Kubectl(), "--kubeconfig", l.Kubeconfig()}, args...)...)
	}
	if err := kubectl("apply", "--server-side", "--force-conflicts", "-f", crds); err != nil {
		return err
	}
	if err := kubectl("wait", "--for=condition=Established", "--timeout=50s", "-f", crds); err != nil {
		return err
	}
	if err := l.ensureWebhookCert(ctx); err != nil {
		return err
	}
	certs := filepath.Join(l.kueueDir(), "upper", "kueue", "metrics", "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(l.kueueDir(), "work"), 0o755); err != nil {
		return err
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := copyFile(filepath.Join(l.webhookCertDir(), f), filepath.Join(certs, f), 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(l.path("run", w.Name+".yaml"), []byte(l.kueueConfig()), 0o644); err != nil {
		return err
	}
	d, err := l.kueueDaemon()
	if err != nil {
		return err
	}
	if _, err := l.procs.Start(d); err != nil {
		return err
	}
	if err := l.procs.Await(ctx, d, 90*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", w.ProbePort))
	}); err != nil {
		return err
	}
	manifest, err := l.webhookManifest(w)
	if err != nil {
		return err
	}
	return l.applyManifest(ctx, w.Name+"-webhooks.yaml", manifest)
}

// StopKueue removes Kueue's webhook registrations, then stops its
// controller. Its CRDs stay (objects of them left behind lose nothing).
func (l *Lab) StopKueue(ctx context.Context) error {
	w := kueueController
	err := rootfs.RunLogged(ctx, time.Minute, filepath.Join(l.LogDir(), "kubectl.log"),
		l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "delete", "--ignore-not-found",
		"mutatingwebhookconfiguration/"+w.registration(), "validatingwebhookconfiguration/"+w.registration())
	return errors.Join(err, l.procs.Stop(w.Name))
}
