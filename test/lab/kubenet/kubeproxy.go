package kubenet

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ServiceCIDR is the apiserver's --service-cluster-ip-range.
var ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")

// proxyTarget is one ClusterIP port the lab's kube-proxy serves.
type proxyTarget struct {
	listen                 string // ClusterIP:port
	namespace, name, ports string // the Service and its port's name
}

// backends are the target's ready endpoints; for default/kubernetes, the
// apiserver on the host's loopback (which no EndpointSlice names: the
// apiserver publishes none for a loopback address).
func (t proxyTarget) backends(kc kubernetes.Interface, apiserver string) Backends {
	if t.namespace == metav1.NamespaceDefault && t.name == "kubernetes" {
		return StaticBackends(apiserver)
	}
	return EndpointBackends(kc, t.namespace, t.name, t.ports)
}

// proxyTargets are the TCP ports of every Service with a ClusterIP.
func proxyTargets(svcs []corev1.Service) map[string]proxyTarget {
	out := map[string]proxyTarget{}
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || s.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
				continue
			}
			listen := net.JoinHostPort(ip, fmt.Sprint(p.Port))
			out[listen] = proxyTarget{listen: listen, namespace: s.Namespace, name: s.Name, ports: p.Name}
		}
	}
	return out
}

// KubeProxy stands in for kube-proxy on the lab's host until ctx ends:
// every Service's ClusterIP is put on lo, and each of its TCP ports is
// forwarded to the Service's ready endpoints (ServiceProxy). Services are
// listed every second; the addresses it added are removed at the end.
// apiserver is the host:port the apiserver serves on (default/kubernetes's
// backend).
func KubeProxy(ctx context.Context, kc kubernetes.Interface, apiserver string) error {
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	live := map[string]running{}
	addrs := map[string]bool{}
	defer func() {
		for _, r := range live {
			r.cancel()
			<-r.done
		}
		for ip := range addrs {
			if err := RemoveLoopbackAddr(context.Background(), ip); err != nil {
				log.Printf("kube-proxy: %v", err)
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		svcs, err := kc.CoreV1().Services("").List(lctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Printf("kube-proxy: services: %v", err)
		} else {
			want := proxyTargets(svcs.Items)
			for key, r := range live {
				if _, ok := want[key]; !ok {
					r.cancel()
					<-r.done
					delete(live, key)
				}
			}
			for key, t := range want {
				if _, ok := live[key]; ok {
					continue
				}
				ip, _, _ := net.SplitHostPort(t.listen)
				if a, err := netip.ParseAddr(ip); err != nil || !ServiceCIDR.Contains(a) {
					continue
				}
				if !addrs[ip] {
					if err := EnsureLoopbackAddr(ctx, ip); err != nil {
						log.Printf("kube-proxy: %v", err)
						continue
					}
					addrs[ip] = true
				}
				pctx, cancel := context.WithCancel(ctx)
				r := running{cancel: cancel, done: make(chan struct{})}
				go func() {
					defer close(r.done)
					if err := ServiceProxy(pctx, t.listen, t.backends(kc, apiserver)); err != nil {
						log.Printf("kube-proxy: %s/%s: %v", t.namespace, t.name, err)
					}
				}()
				live[key] = r
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
