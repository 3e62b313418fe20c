package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// With the nodes it serves read by name (issue 38: 44 of 10,004 at scale),
// the cache hears an admin's drain and resume from those reads alone: the
// table is listed once, at start, and never again while NodeListEvery
// (an hour here) has not passed. An unknown name reads as not found.
func TestCacheFollowsServedNodesByName(t *testing.T) {
	l := lab.Shared(t)
	ctx := context.Background()
	node := l.NodeNames()[len(l.NodeNames())-1]
	t.Cleanup(func() { resumeIfDrained(t, l, node) })
	reg := prometheus.NewRegistry()
	c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile(), Timeout: 10 * time.Second, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cache, rec := startCacheOn(t, c, slurmrest.CacheConfig{PollInterval: 200 * time.Millisecond, Watch: slurmrest.WatchNodes,
		NodeFollow: slurmrest.NodeFollowAlways, NodeListEvery: time.Hour})
	if _, err := cache.Node(node); err != nil {
		t.Fatalf("Node(%s) after the first listing: %v", node, err)
	}
	eventually(t, 10*time.Second, node+" read by name", func() (bool, string) {
		n := requestsTo(t, reg, "GET /node/{name}")
		return n >= 3, fmt.Sprint(n, " reads")
	})

	reason := "e2e follow " + uniqueName("r")
	if _, err := l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=drain", "reason="+reason); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "drain event", func() (bool, string) {
		ups, _, _ := rec.snapshot()
		return slices.ContainsFunc(ups, func(n slurmrest.Node) bool { return n.Name == node && n.State.Drain() && n.Reason == reason }), "none"
	})
	if n, err := cache.Node(node); err != nil || !n.State.Drain() || n.Reason != reason {
		t.Errorf("Node(%s) after the drain = %v %q, %v", node, n.State, n.Reason, err)
	}
	if _, err := l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=resume"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "resume event", func() (bool, string) {
		n, err := cache.Node(node)
		return err == nil && !n.State.Drain(), "still drained"
	})
	// Followed from its first read on: a name Slurm does not know is
	// unknown until a read says it is not there.
	eventually(t, 10*time.Second, "an unknown node read as not found", func() (bool, string) {
		_, err := cache.Node("no-such-node")
		return errors.Is(err, slurmrest.ErrNotFound), errString(err)
	})
	if n := requestsTo(t, reg, "GET /nodes"); n != 1 {
		t.Errorf("the node table was asked %v times, want once (at start)", n)
	}
	if _, deletes, _ := rec.snapshot(); len(deletes) != 0 {
		t.Errorf("delete events %v", deletes)
	}
}

// requestsTo sums onepool_slurmrest_requests_total of endpoint (its label:
// "GET /node/{name}"), whatever the answer's code.
func requestsTo(t *testing.T, reg *prometheus.Registry, endpoint string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "onepool_slurmrest_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if endpointOf(m) == endpoint {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func endpointOf(m *dto.Metric) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "endpoint" {
			return lp.GetValue()
		}
	}
	return ""
}
