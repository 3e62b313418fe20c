package kubenet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"
)

// loopbackAddrs are the IPv4 addresses on lo.
func loopbackAddrs(ctx context.Context) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-o", "-4", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip addr show dev lo: %w: %s", err, out)
	}
	var addrs []netip.Addr
	for _, f := range strings.Fields(string(out)) {
		if p, err := netip.ParsePrefix(f); err == nil {
			addrs = append(addrs, p.Addr())
		}
	}
	return addrs, nil
}

// EnsureLoopbackAddr puts ip/32 on lo unless it is there.
func EnsureLoopbackAddr(ctx context.Context, ip string) error { return loopbackAddr(ctx, ip, "add") }

// RemoveLoopbackAddr takes ip/32 off lo unless it is gone.
func RemoveLoopbackAddr(ctx context.Context, ip string) error { return loopbackAddr(ctx, ip, "del") }

// loopbackAddr adds ip/32 to lo (op "add") or removes it ("del"), unless
// that is so already.
func loopbackAddr(ctx context.Context, ip, op string) error {
	addrs, err := loopbackAddrs(ctx)
	if err != nil {
		return err
	}
	has := false
	for _, a := range addrs {
		has = has || a.String() == ip
	}
	if has == (op == "add") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "addr", op, ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr %s %s/32 dev lo: %w: %s", op, ip, err, out)
	}
	return nil
}

// RemoveServiceAddrs removes every address of the service range from lo
// (what a killed kube-proxy stand-in left).
func RemoveServiceAddrs(ctx context.Context) error {
	addrs, err := loopbackAddrs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range addrs {
		if ServiceCIDR.Contains(a) {
			errs = append(errs, RemoveLoopbackAddr(ctx, a.String()))
		}
	}
	return errors.Join(errs...)
}
