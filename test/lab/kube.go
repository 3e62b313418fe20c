package lab

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
)

func (l *Lab) kubeSteps() []step {
	return []step{
		{"check tools", l.checkTools},
		{"kubernetes pki", l.ensurePKI},
		{"chroot kubeconfig", l.installChrootKubeconfig},
		{"etcd", l.startEtcd},
		{"kube-apiserver", l.startAPIServer},
		{"kube-controller-manager", l.startKubeControllerManager},
		{"kwok", l.startKwok},
		{"kwok nodes", l.ensureKubeNodes},
	}
}

func (l *Lab) pki() pki.PKI { return pki.PKI{Dir: l.path("run", "pki")} }

// APIServerURL is the lab's kube-apiserver.
func (l *Lab) APIServerURL() string { return fmt.Sprintf("https://127.0.0.1:%d", APIServerPort) }

func (l *Lab) checkTools(context.Context) error {
	for _, t := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "kwok"} {
		if _, err := os.Stat(filepath.Join(l.BinDir(), t)); err != nil {
			return fmt.Errorf("%s is not built: run `make tools` (or `make up`)", filepath.Join(l.BinDir(), t))
		}
	}
	if _, err := os.Stat(l.path("kwok-stages.yaml")); err != nil {
		return fmt.Errorf("kwok stages missing: run `make tools`: %w", err)
	}
	return nil
}

func (l *Lab) ensurePKI(context.Context) error {
	p := l.pki()
	if err := p.Ensure(); err != nil {
		return err
	}
	kc, err := p.Kubeconfig(l.APIServerURL())
	if err != nil {
		return err
	}
	_, err = writeIfChanged(l.Kubeconfig(), kc)
	return err
}

func (l *Lab) startEtcd(ctx context.Context) error {
	d := daemon{
		Name: "etcd",
		Argv: []string{filepath.Join(l.BinDir(), "etcd"), "--name", "lab", "--data-dir", l.path("run", "etcd"),
			"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
			"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdClientPort),
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
			"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", EtcdPeerPort),
			"--initial-cluster", fmt.Sprintf("lab=http://127.0.0.1:%d", EtcdPeerPort),
			"--unsafe-no-fsync", "--quota-backend-bytes", "4294967296", "--log-level", "warn"},
		Port: EtcdClientPort,
	}
	if _, err := l.procs.Start(d); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 30*time.Second, filepath.Join(l.LogDir(), "etcd.out"), func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/health", EtcdClientPort))
	})
}

func (l *Lab) startAPIServer(ctx context.Context) error {
	p := l.pki()
	d := daemon{
		Name: "kube-apiserver",
		Argv: []string{filepath.Join(l.BinDir(), "kube-apiserver"),
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
			"--cert-dir", l.path("run", "apiserver-certs"),
		},
		Port: APIServerPort,
	}
	if _, err := l.procs.Start(d); err != nil {
		return err
	}
	client, err := l.adminHTTPClient()
	if err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 90*time.Second, filepath.Join(l.LogDir(), "kube-apiserver.out"), func(ctx context.Context) error {
		return httpOK(ctx, client, l.APIServerURL()+"/readyz")
	})
}

func (l *Lab) adminHTTPClient() (*http.Client, error) {
	p := l.pki()
	cert, err := tls.LoadX509KeyPair(p.Path("admin.crt"), p.Path("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.Path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
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

func (l *Lab) startKwok(ctx context.Context) error {
	d := daemon{
		Name: "kwok",
		Argv: []string{filepath.Join(l.BinDir(), "kwok"), "--kubeconfig", l.Kubeconfig(),
			"--config", l.path("kwok-stages.yaml"),
			"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
			"--server-address", fmt.Sprintf("127.0.0.1:%d", KwokMetricsPort)},
		Port: KwokMetricsPort,
		Env:  []string{"HOME=" + l.path("run"), "PATH=/usr/bin:/bin"},
	}
	if _, err := l.procs.Start(d); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 30*time.Second, filepath.Join(l.LogDir(), "kwok.out"), func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", KwokMetricsPort))
	})
}
