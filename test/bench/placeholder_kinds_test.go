package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
)

const placeholderKindRuns = 4

// TestBenchPlaceholderKinds weighs the two kinds of job a placeholder could
// be on Slurm 26.05: a batch job (what onepool submits: a script holds the
// allocation) and an external job (EXTERNAL_JOB, Slurm ≥ 25.05: no script,
// no launch). For each kind, on one whole node: submit to RUNNING, then,
// with a job that needs the same GPUs pending behind it, scancel to that
// job RUNNING: how soon Slurm hands a deleted pod's GPUs to the next job.
func TestBenchPlaceholderKinds(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	if l.Release().Name == "24.11" {
		t.Skip("Slurm 24.11 has no external jobs: run with SLURM=26.05")
	}
	node := l.NodeNames()[0]
	token, err := os.ReadFile(l.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	api := l.RESTURL() + "/slurm/" + l.Release().RESTAPI
	submit := func(ctx context.Context, name string, external bool) string {
		job := map[string]any{
			"name": name, "partition": "main", "nodes": "1", "required_nodes": []string{node},
			"tres_per_node": "gres/gpu:8", "current_working_directory": "/tmp", "environment": []string{"PATH=/bin:/usr/bin"},
		}
		if external {
			job["flags"] = []string{"EXTERNAL_JOB"}
		} else {
			job["script"] = "#!/bin/bash\nexec sleep 600\n"
		}
		body, _ := json.Marshal(map[string]any{"job": job})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+"/job/submit", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-SLURM-USER-TOKEN", strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			JobID  int `json:"job_id"`
			Errors []struct {
				Description string `json:"description"`
			} `json:"errors"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.JobID == 0 {
			t.Fatalf("submit %s: HTTP %d %v %+v", name, resp.StatusCode, err, out.Errors)
		}
		return strconv.Itoa(out.JobID)
	}
	running := func(ctx context.Context, id string) time.Time {
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			out, err := l.Slurm(ctx, "squeue", "-h", "-j", id, "-o", "%T")
			if err == nil && strings.TrimSpace(string(out)) == "RUNNING" {
				return time.Now()
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("job %s not RUNNING within 90 s", id)
		return time.Time{}
	}
	scancel := func(ctx context.Context, id string) {
		if out, err := l.Slurm(ctx, "scancel", id); err != nil {
			t.Fatalf("scancel %s: %v %s", id, err, out)
		}
	}
	ctx := context.Background()
	for _, kind := range []struct {
		name     string
		external bool
	}{{"batch", false}, {"external", true}} {
		var start, handOver []time.Duration
		for i := 0; i < placeholderKindRuns; i++ {
			t0 := time.Now()
			a := submit(ctx, fmt.Sprintf("bench-%s-%d", kind.name, i), kind.external)
			start = append(start, running(ctx, a).Sub(t0))
			b := submit(ctx, fmt.Sprintf("bench-next-%d", i), false)
			time.Sleep(time.Second) // b is pending behind a
			t1 := time.Now()
			scancel(ctx, a)
			handOver = append(handOver, running(ctx, b).Sub(t1))
			scancel(ctx, b)
			time.Sleep(2 * time.Second) // b's end, before the next run
		}
		reportPercentile("placeholder_"+kind.name+"_submit_to_running_p50_ms", start, 0.5)
		reportPercentile("placeholder_"+kind.name+"_cancel_to_next_job_running_p50_ms", handOver, 0.5)
		reportPercentile("placeholder_"+kind.name+"_cancel_to_next_job_running_max_ms", handOver, 1)
	}
}
