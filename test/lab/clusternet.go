package lab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/onepool/onepool/test/lab/kubenet"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab has no kube-proxy and no CoreDNS. For pods on the real node it
// runs stand-ins on the host (with the real node only):
//   - kube-proxy (kubenet.KubeProxy): every Service's ClusterIP goes on the host's
//     loopback device, where a pod's packets arrive through its default
//     route (the bridge's gateway), and its TCP ports are forwarded to the
//     Service's ready endpoints; so in-cluster config (the `kubernetes`
//     Service, 10.96.0.1, in the apiserver's certificate) works unchanged;
//   - cluster DNS (kubenet.ClusterDNS) on 10.96.0.10, the kubelet's clusterDNS;
//   - slurmrestd at 10.96.0.20:6820: the lab's slurmrestd is a process on
//     127.0.0.1, which no EndpointSlice may name.
const (
	// KubernetesServiceIP is the ClusterIP of default/kubernetes.
	KubernetesServiceIP = "10.96.0.1"
	// SlurmRESTServiceIP:SlurmRESTServicePort is slurmrestd as pods reach it.
	SlurmRESTServiceIP   = "10.96.0.20"
	SlurmRESTServicePort = 6820
)

// PodSlurmRESTURL is slurmrestd's URL for pods on the real node.
func PodSlurmRESTURL() string {
	return fmt.Sprintf("http://%s:%d", SlurmRESTServiceIP, SlurmRESTServicePort)
}

// clusterNetDaemons are the stand-ins, with the address each needs on lo
// before it starts ("" for none: kube-proxy adds its own).
func (l *Lab) clusterNetDaemons() []struct {
	d    daemon
	addr string
} {
	lab := filepath.Join(l.BinDir(), "lab")
	// They read the lab's kubeconfig: its dir, whatever the working directory.
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "ONEPOOL_LAB_DIR=" + l.cfg.Dir, rootfs.EnvSlurm + "=" + l.Release().Name}
	return []struct {
		d    daemon
		addr string
	}{
		{daemon{Name: "kube-proxy", Argv: []string{lab, "kube-proxy"}, Env: env}, ""},
		{daemon{Name: "cluster-dns", Argv: []string{lab, "cluster-dns", net.JoinHostPort(kubenet.ClusterDNSIP, "53")}, Env: env}, kubenet.ClusterDNSIP},
		{daemon{Name: "slurmrestd-service", Argv: []string{lab, "service-proxy",
			net.JoinHostPort(SlurmRESTServiceIP, fmt.Sprint(SlurmRESTServicePort)), fmt.Sprintf("127.0.0.1:%d", SlurmrestdPort)}, Env: env}, SlurmRESTServiceIP},
	}
}

func (l *Lab) startClusterNet(ctx context.Context) error {
	for _, c := range l.clusterNetDaemons() {
		if c.addr != "" {
			if err := kubenet.EnsureLoopbackAddr(ctx, c.addr); err != nil {
				return err
			}
		}
		if _, err := l.procs.Start(c.d); err != nil {
			return err
		}
	}
	// Ready when a pod's view works: the apiserver through its ClusterIP
	// (a TLS handshake: a proxy without a backend accepts and then closes),
	// slurmrestd through its address, and a Service name resolves.
	deadline := time.Now().Add(15 * time.Second)
	apiserver := func(addr string) (io.Closer, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	}
	tcp := func(addr string) (io.Closer, error) { return net.DialTimeout("tcp", addr, time.Second) }
	for _, c := range []struct {
		addr string
		dial func(string) (io.Closer, error)
	}{
		{net.JoinHostPort(KubernetesServiceIP, "443"), apiserver},
		{net.JoinHostPort(SlurmRESTServiceIP, fmt.Sprint(SlurmRESTServicePort)), tcp},
	} {
		addr := c.addr
		for {
			conn, err := c.dial(addr)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the lab's Service stand-ins do not answer on %s: %w", addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", net.JoinHostPort(kubenet.ClusterDNSIP, "53"))
	}}
	for {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := r.LookupHost(lctx, "kubernetes.default.svc."+kubenet.ClusterDomain)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab's cluster DNS does not resolve kubernetes.default.svc: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterNetStatus are the stand-ins for Status.
func (l *Lab) clusterNetStatus() []daemon {
	var ds []daemon
	for _, c := range l.clusterNetDaemons() {
		ds = append(ds, c.d)
	}
	return ds
}

func (l *Lab) stopClusterNet(ctx context.Context) error {
	var errs []error
	for _, c := range l.clusterNetDaemons() {
		errs = append(errs, l.procs.Stop(c.d.Name))
	}
	return errors.Join(append(errs, kubenet.RemoveServiceAddrs(ctx))...)
}
