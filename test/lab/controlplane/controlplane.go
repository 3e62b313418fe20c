// Package controlplane runs the lab's Kubernetes control plane: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler (with the real
// node only) and kwok, each a real process built from the upstream
// sources (`make tools`), on loopback ports away from the daemons'
// defaults.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/onepool/onepool/test/lab/kubenet"
	"github.com/onepool/onepool/test/lab/pki"
	"github.com/onepool/onepool/test/lab/proc"
)

// Ports on 127.0.0.1, away from the daemons' defaults so a real
// Kubernetes on the host never collides with the lab.
const (
	EtcdClientPort            = 23790
	EtcdPeerPort              = 23800
	APIServerPort             = 26443
	KubeControllerManagerPort = 26257
	KubeSchedulerPort         = 26258
	KwokMetricsPort           = 26247
)

// Controllers are the kube-controller-manager controllers the lab runs:
// what a Deployment needs to become pods (deployment, replicaset), what a
// pod needs to get a ServiceAccount token (serviceaccount: the "default"
// account of each namespace; root-ca-cert-publisher: kube-root-ca.crt),
// EndpointSlices for Services, and the garbage collector (a Deployment's
// ReplicaSets and pods go with it; a NodeSet's pods after its finalizer),
// StatefulSets, the binding of PVCs to the real node's volumes (and their
// protection finalizers, which only these controllers remove), and
// the namespace controller (a deleted namespace empties and goes), the
// resource claim controller (a GPU claim whose pod is gone is released),
// disruption (PodDisruptionBudget status, which evictions read) and job
// (batch Jobs make pods; kwok completes them), and the aggregation of the
// built-in roles (admin, edit, view: the tenants of the trust tests hold
// "edit" in their namespaces, as on any cluster), and daemonset (the
// onepool chart's host agent on the real node).
// Not yet: the node lifecycle (kwok Nodes).
const Controllers = "namespace,serviceaccount,root-ca-cert-publisher,deployment,replicaset,statefulset,endpointslice,garbagecollector,persistentvolume-binder,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,resourceclaim-controller,disruption,job,clusterrole-aggregation-controller,daemonset"

// ControlPlane says where the control plane's binaries, state and
// credentials are.
type ControlPlane struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl and kwok.
	BinDir string
	// RunDir holds etcd's data, the components' serving certificates, and
	// is their HOME.
	RunDir string
	// Kubeconfig is the admin's.
	Kubeconfig string
	// KwokStages is kwok's stage configuration.
	KwokStages string
	PKI        pki.PKI
	Procs      proc.Supervisor
	// Kube is the release of kube-apiserver the lab runs ("" the first of
	// KubeReleases).
	Kube KubeRelease
}

// kube is Kube, or the first of KubeReleases when none is set.
func (c ControlPlane) kube() KubeRelease {
	if c.Kube.APIServer == "" {
		return KubeReleases()[0]
	}
	return c.Kube
}

// apiServerBinary is the kube-apiserver of the release the lab runs.
func (c ControlPlane) apiServerBinary() string { return filepath.Join(c.BinDir, c.kube().APIServer) }

// APIServerURL is the lab's kube-apiserver.
func APIServerURL() string { return fmt.Sprintf("https://127.0.0.1:%d", APIServerPort) }

// CheckTools fails, saying how to build them, when a binary is missing.
func (c ControlPlane) CheckTools() error {
	for _, t := range []string{"etcd", filepath.Base(c.apiServerBinary()), "kube-controller-manager", "kubectl", "kwok"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, t)); err != nil {
			return fmt.Errorf("%s is not built: run `make tools` (or `make up`; KUBE=%s for this API server)", filepath.Join(c.BinDir, t), c.kube().Minor)
		}
	}
	if _, err := os.Stat(c.KwokStages); err != nil {
		return fmt.Errorf("kwok stages missing: run `make tools`: %w", err)
	}
	return nil
}

// Etcd is etcd's daemon: one member, no fsync (the lab's state is thrown
// away with it).
func (c ControlPlane) Etcd() proc.Daemon {
	return proc.Daemon{
		Name: "etcd",
		Argv: []string{filepath.Join(c.BinDir, "etcd"), "--name", "lab", "--data-dir", filepath.Join(c.RunDir, "etcd"),
			"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
			"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
			"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
			"--initial-cluster", fmt.Sprintf("lab=http://127.0.0.1:%d", EtcdPeerPort),
			"--unsafe-no-fsync", "--quota-backend-bytes", "4294967296", "--log-level", "warn"},
		Port: EtcdClientPort,
	}
}

// StartEtcd starts etcd unless it runs, and waits for its /health.
func (c ControlPlane) StartEtcd(ctx context.Context) error {
	return c.startPlain(ctx, c.Etcd(), fmt.Sprintf("http://127.0.0.1:%d/health", EtcdClientPort))
}

// startPlain starts d unless it runs, and waits (30 s at most) until url
// answers 200 over plain HTTP.
func (c ControlPlane) startPlain(ctx context.Context, d proc.Daemon, url string) error {
	if _, err := c.Procs.Start(d); err != nil {
		return err
	}
	return c.Procs.Await(ctx, d, 30*time.Second, c.Procs.OutFile(d.Name), func(ctx context.Context) error {
		return HTTPOK(ctx, http.DefaultClient, url)
	})
}

// APIServer is kube-apiserver's daemon.
func (c ControlPlane) APIServer() proc.Daemon {
	p := c.PKI
	return proc.Daemon{
		Name: "kube-apiserver",
		Argv: []string{c.apiServerBinary(),
			"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
			"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
			"--secure-port", fmt.Sprint(APIServerPort),
			"--tls-cert-file", p.Path("apiserver.crt"), "--tls-private-key-file", p.Path("apiserver.key"),
			"--client-ca-file", p.Path("ca.crt"),
			"--service-account-issuer", "https://kubernetes.default.svc",
			"--service-account-key-file", p.Path("sa.pub"), "--service-account-signing-key-file", p.Path("sa.key"),
			"--authorization-mode", "RBAC",
			"--service-cluster-ip-range", kubenet.ServiceCIDR.String(),
			"--allow-privileged=true",
			// The real node's kubelet (ONEPOOL_LAB_REAL_KUBELET) has no resolvable hostname: logs/exec go
			// to its IP, with a client certificate (it takes no anonymous requests).
			"--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate", p.Path("admin.crt"), "--kubelet-client-key", p.Path("admin.key"),
			// The lab's kube-controller-manager runs no node lifecycle
			// controller: nothing would remove the not-ready taint.
			"--disable-admission-plugins", "TaintNodesByCondition",
			"--cert-dir", filepath.Join(c.RunDir, "apiserver-certs"),
		},
		Port: APIServerPort,
	}
}

// StartAPIServer starts kube-apiserver unless it runs, waits for its
// /readyz and checks it is the release asked. One of another release
// (the lab asked another KUBE since) is stopped first: etcd keeps the state.
func (c ControlPlane) StartAPIServer(ctx context.Context) error {
	d := c.APIServer()
	if pid, prog := c.Procs.ReadPid(d.Name); pid != 0 && proc.Alive(pid, prog) && c.Procs.Running(d) == 0 {
		if err := c.Procs.Stop(d.Name); err != nil {
			return err
		}
	}
	if _, err := c.Procs.Start(d); err != nil {
		return err
	}
	client, err := c.AdminHTTPClient()
	if err != nil {
		return err
	}
	if err := c.Procs.Await(ctx, d, 90*time.Second, c.Procs.OutFile(d.Name), func(ctx context.Context) error {
		return HTTPOK(ctx, client, APIServerURL()+"/readyz")
	}); err != nil {
		return err
	}
	return checkVersion(ctx, client, APIServerURL(), c.kube())
}

// AdminHTTPClient talks to kube-apiserver as the lab's admin.
func (c ControlPlane) AdminHTTPClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.PKI.Path("admin.crt"), c.PKI.Path("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(c.PKI.Path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

// HTTPOK fails unless GET url answers 200.
func HTTPOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return nil
}

// ControllerManager is kube-controller-manager's daemon, running
// Controllers.
func (c ControlPlane) ControllerManager() proc.Daemon {
	return proc.Daemon{
		Name: "kube-controller-manager",
		Argv: []string{filepath.Join(c.BinDir, "kube-controller-manager"),
			"--kubeconfig", c.Kubeconfig,
			"--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig,
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(KubeControllerManagerPort),
			"--controllers", Controllers,
			"--root-ca-file", c.PKI.Path("ca.crt"),
			"--leader-elect=false",
			"--kube-api-qps", "100", "--kube-api-burst", "200",
			"--cert-dir", filepath.Join(c.RunDir, "kcm-certs"),
		},
		Port: KubeControllerManagerPort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + c.RunDir},
	}
}

// Scheduler is Kubernetes' default scheduler. It places pods that name
// no scheduler (the chart's own pods, on the real node); the lab runs it
// only with the real node, since kwok Nodes cannot run them.
func (c ControlPlane) Scheduler() proc.Daemon {
	return proc.Daemon{
		Name: "kube-scheduler",
		Argv: []string{filepath.Join(c.BinDir, "kube-scheduler"),
			"--kubeconfig", c.Kubeconfig,
			"--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig,
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(KubeSchedulerPort),
			"--leader-elect=false",
			"--cert-dir", filepath.Join(c.RunDir, "kube-scheduler-certs"),
		},
		Port: KubeSchedulerPort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + c.RunDir},
	}
}

// StartControllerManager starts kube-controller-manager (again, when it
// runs with other flags) and waits for its /healthz.
func (c ControlPlane) StartControllerManager(ctx context.Context) error {
	return c.startComponent(ctx, c.ControllerManager(), KubeControllerManagerPort)
}

// StartScheduler starts kube-scheduler (again, when it runs with other
// flags) and waits for its /healthz.
func (c ControlPlane) StartScheduler(ctx context.Context) error {
	return c.startComponent(ctx, c.Scheduler(), KubeSchedulerPort)
}

// startComponent starts kube-controller-manager or kube-scheduler and
// waits for its /healthz (self-signed serving certificate).
func (c ControlPlane) startComponent(ctx context.Context, d proc.Daemon, port int) error {
	// One started with other flags (a lab from before a change to
	// Controllers) is restarted with these.
	if c.Procs.Running(d) != 0 && !c.Procs.RunsArgv(d) {
		if err := c.Procs.Stop(d.Name); err != nil {
			return err
		}
	}
	if _, err := c.Procs.Start(d); err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // the lab's own self-signed healthz
	}}
	return c.Procs.Await(ctx, d, 60*time.Second, c.Procs.OutFile(d.Name), func(ctx context.Context) error {
		return HTTPOK(ctx, insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	})
}

// Kwok is kwok's daemon: it plays the kubelet of the Nodes annotated
// kwok.x-k8s.io/node=fake.
func (c ControlPlane) Kwok() proc.Daemon {
	return proc.Daemon{
		Name: "kwok",
		Argv: []string{filepath.Join(c.BinDir, "kwok"), "--kubeconfig", c.Kubeconfig,
			"--config", c.KwokStages,
			"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
			"--server-address", fmt.Sprintf("127.0.0.1:%d", KwokMetricsPort)},
		Port: KwokMetricsPort,
		Env:  []string{"HOME=" + c.RunDir, "PATH=/usr/bin:/bin"},
	}
}

// StartKwok starts kwok unless it runs, and waits for its /healthz.
func (c ControlPlane) StartKwok(ctx context.Context) error {
	return c.startPlain(ctx, c.Kwok(), fmt.Sprintf("http://127.0.0.1:%d/healthz", KwokMetricsPort))
}
