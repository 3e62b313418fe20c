package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
)

// TestBenchReconfigure: `scontrol reconfigure` on a lab with 1,000 scale
// nodes (24.11 restarts slurmctld). How long until slurmctld answers again
// with every node; a lost node fails the benchmark.
func TestBenchReconfigure(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	want := len(l.ExtraNodeNames())
	if want < 1000 {
		t.Fatalf("the benchmark needs ONEPOOL_LAB_EXTRA_NODES>=1000 (have %d)", want)
	}
	count := func(ctx context.Context) (int, error) {
		out, err := l.Slurm(ctx, "sinfo", "-h", "-p", lab.ScalePartition, "-o", "%D")
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(out)))
	}
	ctx := context.Background()
	if n, err := count(ctx); err != nil || n != want {
		t.Fatalf("before: %d scale nodes (%v), want %d", n, err, want)
	}
	start := time.Now()
	if err := l.Reconfigure(ctx); err != nil {
		t.Fatal(err)
	}
	answered := time.Since(start)
	n, err := count(ctx)
	if err != nil || n != want {
		t.Fatalf("after reconfigure: %d of %d scale nodes (%v)", n, want, err)
	}
	report("slurmctld_reconfigure_to_answer_ms", float64(answered.Milliseconds()), "ms")
	report("slurmctld_nodes_after_reconfigure", float64(n), "nodes")
}
