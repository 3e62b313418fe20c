package lab

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	nodeOnce sync.Once
	nodeLab  *Lab
	nodeErr  error
	nodeSkip string
	nodeLog  string
)

// SharedNode returns the lab with the real node (containerd + kubelet, Node
// RealNodeName) up, once per test binary. It is skipped unless
// ONEPOOL_LAB_REAL_KUBELET=1 and the user is root. With ONEPOOL_E2E=1 it
// brings up (or reuses) etcd, kube-apiserver and the node (UpNode, no Slurm);
// without, it uses a node that already runs, or skips. The first caller's
// log shows the steps and how long each took.
func SharedNode(tb testing.TB) *Lab {
	tb.Helper()
	first := false
	nodeOnce.Do(func() {
		first = true
		if !RealKubeletEnabled() {
			nodeSkip = EnvRealKubelet + " is not 1: the real kubelet node is off (`lab node up` or " + EnvRealKubelet + "=1 " + EnvE2E + "=1 brings it up)"
			return
		}
		if os.Geteuid() != 0 {
			nodeSkip = "the real node needs root (containerd, mounts, cgroups)"
			return
		}
		cfg, err := ConfigFromEnv()
		if err != nil {
			nodeErr = err
			return
		}
		var buf bytes.Buffer
		cfg.Log = io.MultiWriter(&buf, os.Stderr)
		l, err := New(cfg)
		if err != nil {
			nodeErr = err
			return
		}
		if os.Getenv(EnvE2E) != "1" && l.NodeStatus(io.Discard) > 0 {
			nodeSkip = "no real node runs here: `lab node up` starts one (or " + EnvE2E + "=1 lets the test start it)"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		nodeErr = l.UpNode(ctx)
		nodeLab, nodeLog = l, strings.TrimSpace(buf.String())
	})
	if nodeSkip != "" {
		tb.Skip(nodeSkip)
	}
	if nodeErr != nil {
		tb.Fatalf("lab node: %v", nodeErr)
	}
	if first {
		tb.Logf("lab node up:\n%s", nodeLog)
	}
	return nodeLab
}
