// Package bench holds the benchmarks `make bench` runs on the lab. Each
// prints its figures as "BENCH <name> <value> <unit> slurm=<release>" lines
// (the Slurm release the lab runs, ONEPOOL_LAB_SLURM); none asserts a
// time (the machine is shared and noisy).
package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/rootfs"
)

const (
	benchJobs     = 200
	window        = 60 * time.Second
	minSamples    = 100
	changeWorkers = 3
)

func requireBench(t *testing.T) {
	if os.Getenv("ONEPOOL_BENCH") == "" {
		t.Skip("benchmarks run with `make bench` (ONEPOOL_BENCH=1)")
	}
}

// report prints one figure, rounded to a whole number, labelled with the
// Slurm release the lab runs: "BENCH <name> <value> <unit> slurm=<release>".
func report(name string, value float64, unit string) {
	reportPrec(name, value, 0, unit)
}

// reportPrec prints one figure with prec decimals (see report).
func reportPrec(name string, value float64, prec int, unit string) {
	fmt.Printf("BENCH %s %.*f %s slurm=%s\n", name, prec, value, unit, benchRelease())
}

// reportN prints a figure taken over n samples (a percentile): n=N follows.
func reportN(name string, value float64, unit string, n int) {
	fmt.Printf("BENCH %s %.0f %s slurm=%s n=%d\n", name, value, unit, benchRelease(), n)
}

func benchRelease() string {
	release := os.Getenv(rootfs.EnvSlurm)
	if r, err := rootfs.Named(release); err == nil {
		release = r.Name
	}
	return release
}

// sum adds every series of the named metric family.
func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// TestBenchSlurmrest measures the cache at 1,000 Slurm nodes and 200 running
// jobs, polling every second: first a quiet minute (what an idle cluster
// costs), then a minute of drains and resumes made with scontrol, timing each
// from the command to the cache's event, then a quiet minute again.
func TestBenchSlurmrest(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	sim := l.ExtraNodeNames()
	if len(sim) < 1000 {
		t.Fatalf("the benchmark needs ONEPOOL_LAB_EXTRA_NODES>=1000 (have %d)", len(sim))
	}
	ctx := context.Background()
	client, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	jobs := submitJobs(t, l, client)
	waitRunning(t, client, jobs)

	reg := prometheus.NewRegistry()
	cacheClient, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cache := slurmrest.NewCache(cacheClient, slurmrest.CacheConfig{PollInterval: time.Second})
	w := newWaiter()
	cache.AddNodeHandler(slurmrest.NodeHandler{Update: func(_, n *slurmrest.Node) { w.seen(n) }})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cache.Run(cctx) }()
	defer func() { cancel(); <-done }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := cache.WaitSynced(sctx); err != nil {
		t.Fatal(err)
	}
	all, err := cache.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	cached, _ := cache.Jobs()
	t.Logf("cache holds %d nodes and %d jobs", len(all), len(cached))
	// Let the start-up listings settle before measuring.
	time.Sleep(5 * time.Second)

	// Quiet minute.
	req0, bytes0 := sum(t, reg, "onepool_slurmrest_requests_total"), sum(t, reg, "onepool_slurmrest_response_bytes_total")
	time.Sleep(window)
	req1, bytes1 := sum(t, reg, "onepool_slurmrest_requests_total"), sum(t, reg, "onepool_slurmrest_response_bytes_total")
	perMin := float64(time.Minute) / float64(window)
	report("slurmrest_nodes", float64(len(all)), "nodes")
	report("slurmrest_jobs", float64(len(cached)), "jobs")
	report("slurmrest_requests_per_min", (req1-req0)*perMin, "requests/min")
	report("slurmrest_bytes_per_min", (bytes1-bytes0)*perMin, "bytes/min")

	// A minute of changes.
	var mu sync.Mutex
	var samples []time.Duration
	stop := time.Now().Add(window)
	var wg sync.WaitGroup
	for wi := 0; wi < changeWorkers; wi++ {
		wg.Add(1)
		go func(wi int) {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				node := sim[(i*changeWorkers+wi)%len(sim)]
				for _, drain := range []bool{true, false} {
					d, err := change(ctx, l, w, node, drain, fmt.Sprintf("bench %d-%d", wi, i))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					samples = append(samples, d)
					mu.Unlock()
				}
			}
		}(wi)
	}
	wg.Wait()
	req2, bytes2 := sum(t, reg, "onepool_slurmrest_requests_total"), sum(t, reg, "onepool_slurmrest_response_bytes_total")
	elapsed := window + time.Since(stop)
	perMin = float64(time.Minute) / float64(elapsed)
	if len(samples) < minSamples {
		t.Fatalf("only %d change samples in %s, want %d", len(samples), elapsed, minSamples)
	}
	report("slurmrest_changing_requests_per_min", (req2-req1)*perMin, "requests/min")
	report("slurmrest_changing_bytes_per_min", (bytes2-bytes1)*perMin, "bytes/min")
	report("slurmrest_change_samples", float64(len(samples)), "samples")
	reportPercentile("slurmrest_change_to_event_p50_ms", samples, 0.50)
	reportPercentile("slurmrest_change_to_event_p99_ms", samples, 0.99)

	// A quiet minute again: what an idle cluster costs after churn (on
	// 24.11 nodes that went NOT_RESPONDING once kept every delta full).
	time.Sleep(5 * time.Second)
	req3, bytes3 := sum(t, reg, "onepool_slurmrest_requests_total"), sum(t, reg, "onepool_slurmrest_response_bytes_total")
	time.Sleep(window)
	req4, bytes4 := sum(t, reg, "onepool_slurmrest_requests_total"), sum(t, reg, "onepool_slurmrest_response_bytes_total")
	perMin = float64(time.Minute) / float64(window)
	report("slurmrest_idle_after_churn_requests_per_min", (req4-req3)*perMin, "requests/min")
	report("slurmrest_idle_after_churn_bytes_per_min", (bytes4-bytes3)*perMin, "bytes/min")
}

// change drains or resumes node with scontrol and returns the time until the
// cache reports it.
func change(ctx context.Context, l *lab.Lab, w *waiter, node string, drain bool, reason string) (time.Duration, error) {
	want := func(n *slurmrest.Node) bool {
		if drain {
			return n.State.Drain() && n.Reason == reason
		}
		return !n.State.Drain()
	}
	ch := w.expect(node, want)
	// UNDRAIN, not RESUME: RESUME wakes a powered-down CLOUD node, which then
	// stays NOT_RESPONDING and keeps changing the node table.
	args := []string{"scontrol", "update", "nodename=" + node, "state=undrain"}
	if drain {
		args = []string{"scontrol", "update", "nodename=" + node, "state=drain", "reason=" + reason}
	}
	start := time.Now()
	if out, err := l.Slurm(ctx, args...); err != nil {
		return 0, fmt.Errorf("%v: %w (%s)", args, err, out)
	}
	select {
	case at := <-ch:
		return at.Sub(start), nil
	case <-time.After(15 * time.Second):
		return 0, fmt.Errorf("no cache event for %s (drain=%v) within 15 s", node, drain)
	}
}

// waiter hands cache events to the change that waits for them.
type waiter struct {
	mu    sync.Mutex
	waits map[string]wait
}

type wait struct {
	want func(*slurmrest.Node) bool
	ch   chan time.Time
}

func newWaiter() *waiter { return &waiter{waits: map[string]wait{}} }

func (w *waiter) expect(node string, want func(*slurmrest.Node) bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.waits[node] = wait{want: want, ch: ch}
	w.mu.Unlock()
	return ch
}

func (w *waiter) seen(n *slurmrest.Node) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt, ok := w.waits[n.Name]; ok && wt.want(n) {
		wt.ch <- now
		delete(w.waits, n.Name)
	}
}

// submitJobs starts benchJobs one-CPU jobs in the GPU partition; they are
// cancelled when the test ends.
func submitJobs(t *testing.T, l *lab.Lab, c *slurmrest.Client) []uint32 {
	t.Helper()
	ids := make([]uint32, 0, benchJobs)
	t.Cleanup(func() {
		for _, id := range ids {
			_ = c.CancelJob(context.Background(), id)
		}
	})
	for i := 0; i < benchJobs; i++ {
		id, err := c.SubmitJob(context.Background(), slurmrest.JobSubmit{
			Name: fmt.Sprintf("bench-%d", i), Script: "#!/bin/sh\nsleep 3600\n", Partition: lab.Partition,
			Nodes: "1", Tasks: 1, WorkDir: "/tmp", Environment: []string{"PATH=/usr/bin:/bin"},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func waitRunning(t *testing.T, c *slurmrest.Client, ids []uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		states, err := c.JobStates(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, s := range states {
			if s.State.Base() == slurmrest.JobRunning {
				running++
			}
		}
		if running == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bench jobs running after 5 minutes", running, len(ids))
		}
		time.Sleep(2 * time.Second)
	}
}
