package kubenet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// proxyIdle closes a proxied connection after this long without a byte
// either way (client-go pings its HTTP/2 connections every 30 s).
const proxyIdle = 5 * time.Minute

// Backends lists where a proxied connection may go, in order.
type Backends func(ctx context.Context) []string

// StaticBackends are fixed host:port addresses.
func StaticBackends(addrs ...string) Backends {
	return func(context.Context) []string { return addrs }
}

// EndpointBackends are the ready endpoints of a Service's port, from its
// EndpointSlices (as kube-proxy reads them), listed at most once a second.
func EndpointBackends(kc kubernetes.Interface, namespace, service, port string) Backends {
	var mu sync.Mutex
	var cached []string
	var at time.Time
	return func(ctx context.Context) []string {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < time.Second {
			return cached
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		list, err := kc.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			log.Printf("service-proxy: endpoints of %s/%s: %v", namespace, service, err)
			return cached
		}
		cached, at = readyEndpoints(list.Items, port), time.Now()
		return cached
	}
}

// readyEndpoints are host:port of the ready endpoints of the named port.
func readyEndpoints(slices []discoveryv1.EndpointSlice, port string) []string {
	var out []string
	for _, s := range slices {
		for _, p := range s.Ports {
			if p.Port == nil || (p.Name != nil && *p.Name != port) {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					out = append(out, net.JoinHostPort(a, fmt.Sprint(*p.Port)))
				}
			}
		}
	}
	return out
}

// ParseBackends reads the service-proxy command's backends: host:port or
// endpoints:NAMESPACE/SERVICE/PORTNAME, comma-separated; kc is only needed
// for the latter.
func ParseBackends(spec string, kc func() (kubernetes.Interface, error)) (Backends, error) {
	var all []Backends
	for _, b := range strings.Split(spec, ",") {
		if rest, ok := strings.CutPrefix(b, "endpoints:"); ok {
			parts := strings.Split(rest, "/")
			if len(parts) != 3 {
				return nil, fmt.Errorf("service-proxy: %q: want endpoints:NAMESPACE/SERVICE/PORTNAME", b)
			}
			c, err := kc()
			if err != nil {
				return nil, err
			}
			all = append(all, EndpointBackends(c, parts[0], parts[1], parts[2]))
			continue
		}
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, fmt.Errorf("service-proxy: backend %q: %w", b, err)
		}
		all = append(all, StaticBackends(b))
	}
	if len(all) == 0 {
		return nil, errors.New("service-proxy: no backends")
	}
	return func(ctx context.Context) []string {
		var out []string
		for _, b := range all {
			out = append(out, b(ctx)...)
		}
		return out
	}, nil
}

// ServiceProxy stands in for a Kubernetes Service (kube-proxy) in the lab:
// every connection to listen goes to the next backend, round robin,
// skipping those that refuse it (a stopped replica is an endpoint that is
// not ready). It returns when ctx ends.
func ServiceProxy(ctx context.Context, listen string, backends Backends) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("service-proxy: %w", err)
	}
	go func() { <-ctx.Done(); l.Close() }()
	var next atomic.Uint32
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("service-proxy: %w", err)
		}
		start := int(next.Add(1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			proxyConn(ctx, c, backends(ctx), start)
		}()
	}
}

// proxyConn copies one connection both ways to the first backend that
// accepts it; a connection idle for proxyIdle is closed.
func proxyConn(ctx context.Context, c net.Conn, backends []string, start int) {
	defer c.Close()
	var b net.Conn
	for i := range backends {
		d := net.Dialer{Timeout: time.Second}
		var err error
		if b, err = d.DialContext(ctx, "tcp", backends[(start+i)%len(backends)]); err == nil {
			break
		}
	}
	if b == nil {
		log.Printf("service-proxy: no backend of %v accepts", backends)
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, idleReader{src, dst})
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(b, c)
	go cp(c, b)
	<-done
	<-done
}

// idleReader pushes both connections' deadlines on with every read.
type idleReader struct{ src, dst net.Conn }

func (r idleReader) Read(p []byte) (int, error) {
	d := time.Now().Add(proxyIdle)
	_ = r.src.SetDeadline(d)
	_ = r.dst.SetDeadline(d)
	return r.src.Read(p)
}
