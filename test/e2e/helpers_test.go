// Package e2e holds the end-to-end tests. They run on the real lab (real
// slurmctld, slurmd and slurmrestd; real kube-apiserver and etcd; kwok
// nodes), brought up or reused by lab.Shared.
package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
// soon is check, asked again for up to 15 s until it holds: events are
// posted asynchronously (client-go's broadcaster), after the action a test
// saw. It returns check's last answer.
func soon(check func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, seen := check()
		if ok || time.Now().After(deadline) {
			return ok, seen
		}
		time.Sleep(300 * time.Millisecond)
	}
}

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
// holds checks that cond stays true for d, polled every 250 ms: room for
// a wrong action to show, and a failure the moment it does.
func holds(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ok, state := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

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

// slurmUnknown makes Slurm's state unknown to onepool's components for a
// test, until the returned end is called (also at cleanup). In process
// mode the components talk to slurmrestd through a proxy that fails every
// read and forwards every write: a component that acts on an unknown
// state would change Slurm for real, so "Slurm unchanged" is an assert
// that can fail (writesReach is true). The chart's components take
// slurmrestd's URL from the chart's values: there slurmrestd is stopped,
// no write can reach Slurm, and writesReach is false.
func slurmUnknown(t *testing.T, l *lab.Lab) (end func(), writesReach bool) {
	t.Helper()
	ctx := context.Background()
	if lab.ChartMode() {
		if err := l.StopSlurmrestd(); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		end = func() {
			once.Do(func() {
				if err := l.StartSlurmrestd(ctx); err != nil {
					t.Errorf("slurmrestd back: %v", err)
				}
			})
		}
		t.Cleanup(end)
		return end, false
	}
	px, err := startFaultProxy(l.RESTURL())
	if err != nil {
		t.Fatal(err)
	}
	px.set(proxyReadsFail)
	if err := l.SetComponentRESTURL(ctx, px.URL()); err != nil {
		_ = px.Close()
		t.Fatal(err)
	}
	var once sync.Once
	end = func() {
		once.Do(func() {
			if err := l.SetComponentRESTURL(ctx, ""); err != nil {
				t.Errorf("components back on slurmrestd: %v", err)
			}
			_ = px.Close()
		})
	}
	t.Cleanup(end)
	return end, true
}
