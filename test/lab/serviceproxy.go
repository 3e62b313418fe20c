package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ServiceProxy stands in for a Kubernetes Service in front of processes that
// the lab runs on one host: every connection to listen goes to the next
// backend, round robin, skipping those that refuse it (a stopped replica is
// an endpoint that is not ready). It returns when ctx ends.
func ServiceProxy(ctx context.Context, listen string, backends []string) error {
	if len(backends) == 0 {
		return errors.New("service-proxy: no backends")
	}
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
			proxyConn(ctx, c, backends, start)
		}()
	}
}

// proxyConn copies one connection both ways to the first backend that
// accepts it; a connection idle for a minute is closed.
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
	deadline := time.Now().Add(time.Minute)
	_ = c.SetDeadline(deadline)
	_ = b.SetDeadline(deadline)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
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
