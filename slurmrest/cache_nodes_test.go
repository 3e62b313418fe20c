package slurmrest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	routeNodes      = "GET /nodes/"
	routeNodesDelta = "GET /nodes/?update_time=1795229216" // nodes.200.json's last_update
	routeNodeGPU0   = "GET /node/gpu-0"
	routeNodeGPU1   = "GET /node/gpu-1"
)

func TestFollowByName(t *testing.T) {
	for _, tc := range []struct {
		name             string
		mode             NodeFollow
		followed, tabled int
		want             bool
	}{
		{"auto: nothing followed of 10,000 pings", NodeFollowAuto, 0, 10_000, true},
		{"auto: nothing followed of a small lab's table asks it", NodeFollowAuto, 0, 8, false},
		{"auto: one followed of 32", NodeFollowAuto, 1, 32, true},
		{"auto: 44 served of 10,000", NodeFollowAuto, 44, 10_000, true},
		{"auto: a 32nd of the table", NodeFollowAuto, 312, 10_000, true},
		{"auto: more than a 32nd", NodeFollowAuto, 313, 10_000, false},
		{"auto: every node served (bench-syncer: 1,000 of 1,004)", NodeFollowAuto, 1_000, 1_004, false},
		{"auto: a small lab", NodeFollowAuto, 4, 8, false},
		{"auto: beyond the reads a poll may make", NodeFollowAuto, maxFollowedNodes + 1, 1_000_000, false},
		{"never", NodeFollowNever, 1, 10_000, false},
		{"always, a small lab", NodeFollowAlways, 4, 4, true},
		{"always, nothing followed", NodeFollowAlways, 0, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, followByName(tc.mode, tc.followed, tc.tabled))
		})
	}
}

func TestParseNodeFollow(t *testing.T) {
	for in, want := range map[string]NodeFollow{"": NodeFollowAuto, "auto": NodeFollowAuto, "never": NodeFollowNever, "always": NodeFollowAlways} {
		got, err := ParseNodeFollow(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseNodeFollow("sometimes")
	require.ErrorContains(t, err, "sometimes")
}

// A node read through Node is followed by name each poll: the table is
// listed once (at start; NodeListEvery is an hour) and never again, so
// what a poll costs follows the nodes read, not the table. A followed
// node Slurm stops knowing is deleted after missesBeforeDelete polls.
func TestCacheFollowsTheNodesItIsAskedFor(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		routeNodes:    "nodes.200.json",
		routeNodeGPU0: "node_gpu-0.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, Watch: WatchNodes, NodeFollow: NodeFollowAlways, NodeListEvery: time.Hour})
	var deleted atomic.Value
	cache.AddNodeHandler(NodeHandler{Delete: func(n *Node) { deleted.Store(n.Name) }})
	runSynced(t, cache)
	n, err := cache.Node("gpu-0") // fresh from the first listing; followed from now on
	require.NoError(t, err)
	require.Equal(t, "gpu:h100:8", n.Gres)
	require.Eventually(t, func() bool { return rp.count(routeNodeGPU0) >= 5 }, 10*time.Second, 5*time.Millisecond, "gpu-0 not read by name")
	require.False(t, cache.Stale())
	require.Equal(t, 1, rp.count(routeNodes), "listed the table again")
	require.Zero(t, rp.count(routeNodesDelta), "asked the table's delta")
	require.Zero(t, rp.count(routeNodeGPU1), "read a node nobody asked for")
	require.WithinDuration(t, time.Now(), cache.NodeSyncedAt("gpu-0"), time.Second, "gpu-0's read time")

	rp.set(routeNodeGPU0, "node_unknown.200.json")
	require.Eventually(t, func() bool { return deleted.Load() == "gpu-0" }, 10*time.Second, 5*time.Millisecond, "gpu-0 never deleted")
	_, err = cache.Node("gpu-0")
	require.ErrorIs(t, err, ErrNotFound)
	nodes, err := cache.Nodes()
	require.NoError(t, err)
	require.Len(t, nodes, 3)
}

// A node the cache did not follow, read once the table's listing is
// StaleAfter old, is unknown (never old data) until the next poll has read
// it by name.
func TestCacheUnfollowedNodeIsUnknownUntilRead(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		routeNodes:        "nodes.200.json",
		routeNodeGPU1:     "node_gpu-0.200.json", // any node's answer; its name is gpu-0
		"GET /node/gpu-2": "node_unknown.200.json",
		"GET /ping/":      "ping.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, StaleAfter: 300 * time.Millisecond,
		Watch: WatchNodes, NodeFollow: NodeFollowAlways, NodeListEvery: time.Hour})
	runSynced(t, cache)
	// Nothing followed: polls ping, and the cache stays fresh.
	require.Eventually(t, func() bool { return rp.count("GET /ping/") >= 20 }, 10*time.Second, 5*time.Millisecond)
	require.False(t, cache.Stale())
	_, err := cache.Node("gpu-2")
	require.ErrorIs(t, err, ErrStale, "answered a node from a table listed long ago")
	_, err = cache.Nodes()
	require.NoError(t, err, "the table is younger than NodeListEvery")

	// gpu-1's answer names another node: Slurm has no gpu-1 as far as
	// this read goes (the adapter's rule), and the view says so.
	_, err = cache.Node("gpu-1")
	require.ErrorIs(t, err, ErrStale)
	require.Eventually(t, func() bool {
		_, err := cache.Node("gpu-1")
		return errors.Is(err, ErrNotFound)
	}, 10*time.Second, 5*time.Millisecond, "gpu-1 stayed unknown")
	require.Equal(t, 1, rp.count(routeNodes), "listed the table again")
}

// auto: with every node it serves a good share of the table (a small lab),
// the cache asks the table's delta each poll, as before following existed,
// and reads no node by name.
func TestCacheAutoAsksTheTableWhenItServesMuchOfIt(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		routeNodes:      "nodes.200.json",
		routeNodesDelta: "nodes_unchanged.304.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, Watch: WatchNodes})
	runSynced(t, cache)
	_, err := cache.Node("gpu-0")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rp.count(routeNodesDelta) >= 5 }, 10*time.Second, 5*time.Millisecond)
	require.Zero(t, rp.count(routeNodeGPU0), "read a node by name")
	_, err = cache.Node("gpu-0")
	require.NoError(t, err)
}

// While the followed nodes are read by name, the table is asked every
// NodeListEvery (its delta: "unchanged" here), beside the polls.
func TestCacheAsksTheTableEveryNodeListEvery(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		routeNodes:      "nodes.200.json",
		routeNodesDelta: "nodes_unchanged.304.json",
		routeNodeGPU0:   "node_gpu-0.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, Watch: WatchNodes, NodeFollow: NodeFollowAlways,
		NodeListEvery: 200 * time.Millisecond})
	runSynced(t, cache)
	_, err := cache.Node("gpu-0")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rp.count(routeNodesDelta) >= 3 }, 10*time.Second, 5*time.Millisecond)
	deltas, reads := rp.count(routeNodesDelta), rp.count(routeNodeGPU0)
	assert.Greater(t, reads, 3*deltas, "the table asked about as often as the followed node")
	_, err = cache.Nodes()
	require.NoError(t, err)
}

// A table listing asked before a followed node's read, and merged after
// it, neither takes the node back to the older state nor counts it
// missing.
func TestViewKeepsWhatWasReadAfterTheListing(t *testing.T) {
	readAt := map[string]time.Time{}
	v := newView(func(n *Node) string { return n.Name }, (*Node).Equal)
	v.heldNewer = func(k string, asked time.Time) bool { return readAt[k].After(asked) }
	t0 := time.Unix(1795229300, 0)
	v.apply([]Node{{Name: "a"}, {Name: "b"}}, t0, t0)
	// a drained, read by name at t0+2; b read by name at t0+2, then gone.
	drained := Node{Name: "a", State: NodeState{"IDLE", "DRAIN"}, Reason: "admin"}
	v.follow([]Node{drained, {Name: "b"}}, nil, nil)
	readAt["a"], readAt["b"] = t0.Add(2*time.Second), t0.Add(2*time.Second)
	// A listing asked at t0+1 (before the reads), without b.
	for range missesBeforeDelete {
		evs := v.apply([]Node{{Name: "a"}}, t0, t0.Add(time.Second))
		require.Empty(t, evs, "an older listing changed what was read after it")
	}
	a, _ := v.get("a")
	require.True(t, a.State.Drain())
	_, ok := v.get("b")
	require.True(t, ok, "b deleted by listings older than its read")
	// A listing asked after the reads decides.
	var evs []event[Node]
	for range missesBeforeDelete {
		evs = append(evs, v.apply([]Node{{Name: "a"}}, t0, t0.Add(3*time.Second))...)
	}
	require.Len(t, evs, 2)
	require.Equal(t, "update", evs[0].typ)
	require.Equal(t, "delete", evs[1].typ)
}
