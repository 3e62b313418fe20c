package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// The scale benchmark's queue of other users' work: jobs of the lab's
// plain user, held so they never run, each a job record of its own (a
// pending array is one record until its tasks start: it costs Slurm's
// listings nothing like its task count).
const (
	foreignUser    = lab.JailUser
	foreignWorkers = 8
	listingTimeout = 10 * time.Minute
	// scaleWindow is the idle window: one of the controller manager's
	// node table intervals (--slurm-node-list-interval, 5 m), so that a
	// figure holds the table's listing as often as it comes.
	scaleWindow = 5 * time.Minute
)

// TestBenchScale measures what an idle pool costs at the size of a real
// GPU cloud (issue 38): the lab's Slurm nodes (ONEPOOL_LAB_EXTRA_NODES,
// each with a kwok Node) and ONEPOOL_BENCH_FOREIGN_JOBS held jobs of
// another user, with onepool's controller manager and scheduler running
// as the lab runs them. Figures: slurmrestd bytes and requests per
// minute each component asks for while nothing changes, their resident
// memory and in-use heap (profiles kept beside the log), what one listing
// of every job and one /jobs/state cost slurmrestd (the scheduler lists
// every job once, when it starts), pod → bound and the scheduler's bytes
// per pod placed, cordon → drain and drain → annotation. Each line is
// labelled nodes= and jobs=.
func TestBenchScale(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	ctx := context.Background()
	want, err := strconv.Atoi(envOr("ONEPOOL_BENCH_FOREIGN_JOBS", "50000"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile(), Timeout: listingTimeout})
	if err != nil {
		t.Fatal(err)
	}
	stopGuard := guardSlurmrestd(t, l)
	defer stopGuard()
	start := time.Now()
	jobs := ensureForeignJobs(t, l, admin, want)
	t.Logf("%d pending jobs in Slurm (%d asked; %s)", jobs, want, time.Since(start).Round(time.Second))
	nodes := len(l.ExtraNodeNames()) + len(l.NodeNames())
	rep := func(name string, v float64, unit string) {
		fmt.Printf("BENCH %s %.0f %s slurm=%s nodes=%d jobs=%d\n", name, v, unit, benchRelease(), nodes, jobs)
	}
	rep("scale_slurm_nodes", float64(nodes), "nodes")
	rep("scale_jobs", float64(jobs), "jobs")

	// What slurmrestd spends on one listing of each kind, asked directly.
	for _, kind := range []string{"jobs", "jobs/state", "nodes"} {
		n, d, err := timedGet(ctx, l, kind)
		if err != nil {
			t.Logf("GET /%s: %v after %s", kind, err, d.Round(time.Millisecond))
		}
		rep("scale_listing_"+metricName(kind)+"_bytes", float64(n), "bytes")
		rep("scale_listing_"+metricName(kind)+"_ms", float64(d.Milliseconds()), "ms")
	}

	// The components settle on the queue (the scheduler's first listing
	// of it), then a quiet window.
	time.Sleep(settle())
	urls := map[string]string{
		"controller_manager": l.ControllerManagerMetricsURL(),
		"scheduler":          fmt.Sprintf("https://127.0.0.1:%d/metrics", lab.SchedulerPort),
	}
	before := map[string][2]float64{}
	for c, u := range urls {
		before[c] = [2]float64{scrapeSum(t, l, u, "onepool_slurmrest_requests_total"), scrapeSum(t, l, u, "onepool_slurmrest_response_bytes_total")}
	}
	time.Sleep(scaleWindow)
	perMin := float64(time.Minute) / float64(scaleWindow)
	for c, u := range urls {
		req, by := scrapeSum(t, l, u, "onepool_slurmrest_requests_total"), scrapeSum(t, l, u, "onepool_slurmrest_response_bytes_total")
		rep("scale_idle_"+c+"_requests_per_min", (req-before[c][0])*perMin, "requests/min")
		rep("scale_idle_"+c+"_bytes_per_min", (by-before[c][1])*perMin, "bytes/min")
	}
	benchScalePlacement(t, l, rep)
	for c, daemon := range map[string]string{"controller_manager": "onepool-controller-manager", "scheduler": "onepool-scheduler",
		"slurmrestd": "slurmrestd", "slurmctld": "slurmctld"} {
		rss, err := l.DaemonRSS(daemon)
		if err != nil {
			t.Error(err)
			continue
		}
		rep("scale_"+c+"_rss_mib", float64(rss)/(1<<20), "MiB")
	}
	for c, base := range map[string]string{"controller_manager": fmt.Sprintf("http://127.0.0.1:%d", lab.ManagerPprofPort),
		"scheduler": fmt.Sprintf("https://127.0.0.1:%d", lab.SchedulerPort)} {
		inuse, err := heapProfile(t, l, base, c)
		if err != nil {
			t.Error(err)
			continue
		}
		rep("scale_"+c+"_heap_inuse_mib", inuse/(1<<20), "MiB")
	}
	benchScaleSyncer(t, l, rep)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// settle is how long the components get before the quiet window
// (ONEPOOL_BENCH_SETTLE, default 60 s).
func settle() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("ONEPOOL_BENCH_SETTLE")); err == nil {
		return d
	}
	return time.Minute
}

func metricName(kind string) string {
	b := []byte(kind)
	for i, c := range b {
		if c == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}

// timedGet GETs /slurm/<api>/<kind>/ as the lab's admin, as onepool's
// client asks (compact JSON), and returns the body's size and the time it
// took.
func timedGet(ctx context.Context, l *lab.Lab, kind string) (int64, time.Duration, error) {
	tok, err := os.ReadFile(l.TokenFile())
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, listingTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/slurm/%s/%s/", l.RESTURL(), l.Release().RESTAPI, kind), nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("X-SLURM-USER-TOKEN", string(bytes.TrimSpace(tok)))
	req.Header.Set("Accept", "application/json") // compact, as onepool asks
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return n, d, err
}

// ensureForeignJobs queues held jobs of foreignUser until Slurm holds want
// pending jobs (a rerun reuses the queue) and returns how many it holds.
func ensureForeignJobs(t *testing.T, l *lab.Lab, admin *slurmrest.Client, want int) int {
	t.Helper()
	ctx := context.Background()
	queued := func() int {
		states, err := admin.AllJobStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range states {
			if s.State.Base() == slurmrest.JobPending {
				n++
			}
		}
		return n
	}
	missing := want - queued()
	if missing <= 0 {
		return queued()
	}
	tok, err := l.MintToken(ctx, foreignUser, 4*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"job": map[string]any{
		"name": lab.ScaleJobName, "partition": "main", "hold": true, "nodes": "1", "tasks": 1,
		"current_working_directory": "/tmp", "environment": []string{"PATH=/usr/bin:/bin"},
		"script": "#!/bin/sh\ntrue\n"}})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/slurm/%s/job/submit", l.RESTURL(), l.Release().RESTAPI)
	c := &http.Client{Timeout: 30 * time.Second}
	var left atomic.Int64
	left.Store(int64(missing))
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range foreignWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := submitHeld(ctx, c, url, tok, body); err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("submitting a held job as %s: %v", foreignUser, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	t.Logf("submitted %d held jobs as %s in %s", missing, foreignUser, time.Since(start).Round(time.Second))
	return queued()
}

func submitHeld(ctx context.Context, c *http.Client, url, tok string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-SLURM-USER-TOKEN", tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	// slurmrestd may answer 200 with errors.
	var answer struct {
		Errors []json.RawMessage `json:"errors"`
		JobID  uint32            `json:"job_id"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || len(answer.Errors) > 0 || answer.JobID == 0 {
		return fmt.Errorf("no job: %s", b)
	}
	return nil
}

// guardSlurmrestd keeps the machine alive: with tens of thousands of jobs
// the scheduler's cache asks slurmrestd for listings it cannot finish in
// the request timeout, and slurmrestd builds each abandoned answer (GiBs
// each; 19 GiB in five minutes on this 24 GiB machine; one listing of
// 50k jobs alone peaks at 10 GiB, and slurmrestd keeps what it took).
// Past ONEPOOL_BENCH_SLURMRESTD_MAX_MIB (14336) the benchmark fails and
// kills the lab's schedulers and slurmrestd (`lab up` starts them again).
// The returned func stops the guard.
func guardSlurmrestd(t *testing.T, l *lab.Lab) func() {
	limit, err := strconv.ParseInt(envOr("ONEPOOL_BENCH_SLURMRESTD_MAX_MIB", "14336"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			rss, err := l.DaemonRSS("slurmrestd")
			if err != nil || rss>>20 <= limit {
				continue
			}
			fmt.Printf("BENCH scale_slurmrestd_rss_limit_mib %d MiB slurm=%s\n", rss>>20, benchRelease())
			t.Errorf("slurmrestd holds %d MiB (limit %d): killing the lab's schedulers and slurmrestd before the machine runs out", rss>>20, limit)
			for _, d := range []string{"onepool-scheduler", "onepool-scheduler-1", "slurmrestd"} {
				_ = l.KillDaemon(d) // not running: nothing to kill
			}
			return
		}
	}()
	return func() { close(done); <-stopped }
}
