package kubenet

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The lab's stand-in for cluster DNS (CoreDNS's kubernetes plugin, the
// part pods use): A records for <service>.<namespace>.svc.<domain> (the
// ClusterIP, or a headless Service's ready endpoints) and for
// <hostname>.<service>.<namespace>.svc.<domain> (a StatefulSet pod behind
// its headless Service). Every other name is NXDOMAIN: pods on the real
// node reach nothing outside the lab.
const (
	// ClusterDNSIP is the kubelet's clusterDNS on the real node.
	ClusterDNSIP  = "10.96.0.10"
	ClusterDomain = "cluster.local"
	dnsTTL        = 5
)

// dnsView is what the answers are made from.
type dnsView struct {
	services []corev1.Service
	slices   []discoveryv1.EndpointSlice
}

// resolveA answers an A question: the addresses, and whether the name is
// one this server knows (false: NXDOMAIN).
func (v dnsView) resolveA(name string) ([]netip.Addr, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	rest, ok := strings.CutSuffix(name, ".svc."+ClusterDomain)
	if !ok {
		return nil, false
	}
	parts := strings.Split(rest, ".")
	var host, svc, ns string
	switch len(parts) {
	case 2:
		svc, ns = parts[0], parts[1]
	case 3:
		host, svc, ns = parts[0], parts[1], parts[2]
	default:
		return nil, false
	}
	for _, s := range v.services {
		if s.Name != svc || s.Namespace != ns {
			continue
		}
		if host == "" && s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
			a, err := netip.ParseAddr(s.Spec.ClusterIP)
			return []netip.Addr{a}, err == nil
		}
		addrs := v.endpoints(ns, svc, host, s.Spec.PublishNotReadyAddresses)
		return addrs, host == "" || len(addrs) > 0
	}
	return nil, false
}

// endpoints are the IPv4 addresses of a Service's endpoints (only the one
// named host when host is set; only ready ones unless notReady).
func (v dnsView) endpoints(ns, svc, host string, notReady bool) []netip.Addr {
	var out []netip.Addr
	for _, sl := range v.slices {
		if sl.Namespace != ns || sl.Labels[discoveryv1.LabelServiceName] != svc {
			continue
		}
		for _, e := range sl.Endpoints {
			if host != "" && (e.Hostname == nil || *e.Hostname != host) {
				continue
			}
			if !notReady && e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					out = append(out, ip)
				}
			}
		}
	}
	return out
}

// answer builds the reply to one query message.
func (v dnsView) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addrs, known := v.resolveA(q.Name.String())
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// ClusterDNS serves the lab's cluster DNS on listen (UDP) until ctx ends,
// from Services and EndpointSlices listed at most once a second.
func ClusterDNS(ctx context.Context, listen string, kc kubernetes.Interface) error {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", listen)
	if err != nil {
		return fmt.Errorf("cluster-dns: %w", err)
	}
	go func() { <-ctx.Done(); pc.Close() }()
	var mu sync.Mutex
	var view dnsView
	var at time.Time
	current := func() dnsView {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < time.Second {
			return view
		}
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		svcs, err := kc.CoreV1().Services("").List(lctx, metav1.ListOptions{})
		if err != nil {
			log.Printf("cluster-dns: services: %v", err)
			return view
		}
		sls, err := kc.DiscoveryV1().EndpointSlices("").List(lctx, metav1.ListOptions{})
		if err != nil {
			log.Printf("cluster-dns: endpoint slices: %v", err)
			return view
		}
		view, at = dnsView{services: svcs.Items, slices: sls.Items}, time.Now()
		return view
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("cluster-dns: %w", err)
		}
		reply, err := current().answer(buf[:n])
		if err != nil {
			continue // not a query we can parse: no answer, as a server under garbage would
		}
		_ = pc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = pc.WriteTo(reply, from)
	}
}
