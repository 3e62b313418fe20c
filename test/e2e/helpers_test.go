// Package e2e holds the end-to-end tests. They run on the real lab (real
// slurmctld, slurmd and slurmrestd; real kube-apiserver and etcd; kwok
// nodes), brought up or reused by lab.Shared.
package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

func slurmClient(t *testing.T, l *lab.Lab) *slurmrest.Client {
	t.Helper()
	c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls cond every 200 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s (last seen: %s)", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scontrolNode returns `scontrol show node -o NAME` as key=value pairs: what
// an admin would look at, read past slurmrestd.
func scontrolNode(t *testing.T, l *lab.Lab, name string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := l.Slurm(ctx, "scontrol", "show", "node", "-o", name)
	if err != nil {
		t.Fatalf("scontrol show node %s: %v", name, err)
	}
	return parseKV(string(out))
}

func scontrolJob(t *testing.T, l *lab.Lab, id uint32) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := l.Slurm(ctx, "scontrol", "show", "job", "-o", fmt.Sprint(id))
	if err != nil {
		t.Fatalf("scontrol show job %d: %v", id, err)
	}
	return parseKV(string(out))
}

// parseKV splits scontrol's one-line output. Values may hold spaces
// (Reason=...), so a token without "=" belongs to the value before it.
func parseKV(s string) map[string]string {
	kv := map[string]string{}
	last := ""
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || !isKey(k) {
			if last != "" {
				kv[last] += " " + f
			}
			continue
		}
		kv[k] = v
		last = k
	}
	return kv
}

func isKey(k string) bool {
	if k == "" || k[0] < 'A' || k[0] > 'Z' {
		return false
	}
	return !strings.ContainsAny(k, " []@:")
}

// resumeIfDrained puts a node back the way tests found it.
func resumeIfDrained(t *testing.T, l *lab.Lab, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if st := scontrolNode(t, l, name)["State"]; strings.Contains(st, "DRAIN") {
		if _, err := l.Slurm(ctx, "scontrol", "update", "nodename="+name, "state=resume"); err != nil {
			t.Errorf("resume %s: %v", name, err)
		}
	}
}

var nameSeq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e6, nameSeq.Add(1))
}

func sleepJob(name string, gpus int) slurmrest.JobSubmit {
	return slurmrest.JobSubmit{
		Name:        name,
		Script:      "#!/bin/sh\nsleep 600\n",
		Partition:   lab.Partition,
		Nodes:       "1",
		Tasks:       1,
		TresPerNode: fmt.Sprintf("gres/gpu:%d", gpus),
		WorkDir:     "/tmp",
		Environment: []string{"PATH=/usr/bin:/bin"},
		Comment:     "onepool e2e",
	}
}
