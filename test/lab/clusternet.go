package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The lab has no kube-proxy. For pods on the real node it stands in for the
// two Services they need: the cluster's `kubernetes` Service (its ClusterIP,
// which in-cluster clients read from KUBERNETES_SERVICE_HOST) and a Service
// for slurmrestd. Each address is put on the host's loopback device, where
// a pod's packets arrive through its default route (the bridge's gateway),
// and a `lab service-proxy` daemon forwards it to the daemon on 127.0.0.1.
const (
	// KubernetesServiceIP is the ClusterIP of default/kubernetes (the
	// first address of --service-cluster-ip-range; in the apiserver's
	// certificate).
	KubernetesServiceIP = "10.96.0.1"
	// SlurmRESTServiceIP:SlurmRESTServicePort is slurmrestd as pods reach it.
	SlurmRESTServiceIP   = "10.96.0.20"
	SlurmRESTServicePort = 6820
)

type clusterService struct {
	name, listen, backend string
}

func (l *Lab) clusterServices() []clusterService {
	return []clusterService{
		{"kubernetes-service", net.JoinHostPort(KubernetesServiceIP, "443"), fmt.Sprintf("127.0.0.1:%d", APIServerPort)},
		{"slurmrestd-service", net.JoinHostPort(SlurmRESTServiceIP, fmt.Sprint(SlurmRESTServicePort)), fmt.Sprintf("127.0.0.1:%d", SlurmrestdPort)},
	}
}

// PodSlurmRESTURL is slurmrestd's URL for pods on the real node.
func PodSlurmRESTURL() string {
	return fmt.Sprintf("http://%s:%d", SlurmRESTServiceIP, SlurmRESTServicePort)
}

func (s clusterService) daemon(l *Lab) daemon {
	return daemon{
		name: s.name,
		argv: []string{filepath.Join(l.BinDir(), "lab"), "service-proxy", s.listen, s.backend},
		env:  []string{"PATH=/usr/bin:/bin"},
	}
}

func (l *Lab) startClusterNet(ctx context.Context) error {
	for _, s := range l.clusterServices() {
		ip, _, _ := net.SplitHostPort(s.listen)
		if err := ensureLoopbackAddr(ctx, ip); err != nil {
			return err
		}
		if _, err := l.start(s.daemon(l)); err != nil {
			return err
		}
	}
	// A listening proxy is the readiness check.
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range l.clusterServices() {
		for {
			c, err := net.DialTimeout("tcp", s.listen, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not listen on %s: %w", s.name, s.listen, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (l *Lab) stopClusterNet(ctx context.Context) error {
	var errs []error
	for _, s := range l.clusterServices() {
		errs = append(errs, l.stopDaemon(s.name))
		ip, _, _ := net.SplitHostPort(s.listen)
		errs = append(errs, removeLoopbackAddr(ctx, ip))
	}
	return errors.Join(errs...)
}

func loopbackHas(ctx context.Context, ip string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("ip addr show dev lo: %w: %s", err, out)
	}
	return strings.Contains(string(out), " "+ip+"/32 "), nil
}

func ensureLoopbackAddr(ctx context.Context, ip string) error { return loopbackAddr(ctx, ip, "add") }

func removeLoopbackAddr(ctx context.Context, ip string) error { return loopbackAddr(ctx, ip, "del") }

// loopbackAddr adds ip/32 to lo (op "add") or removes it ("del"), unless
// that is so already.
func loopbackAddr(ctx context.Context, ip, op string) error {
	if has, err := loopbackHas(ctx, ip); err != nil || has == (op == "add") {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "addr", op, ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr %s %s/32 dev lo: %w: %s", op, ip, err, out)
	}
	return nil
}
