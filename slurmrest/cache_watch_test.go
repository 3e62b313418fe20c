package slurmrest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A cache lists only the kinds it watches: the controller manager's
// (nodes) never asks slurmrestd for jobs, the scheduler's (jobs) never for
// nodes; each is synced and fresh on its own kind, and a read of the other
// kind is a wiring error, never an empty answer. Unchanged answers (the
// replayed update_time deltas) keep both fresh.
func TestCacheListsOnlyWhatItWatches(t *testing.T) {
	routes := map[string]string{
		"GET /nodes/":                        "nodes.200.json",
		"GET /nodes/?update_time=1795229216": "nodes_unchanged.304.json",
		"GET /jobs/":                         "jobs.200.json",
		"GET /jobs/state/":                   "jobs_state.200.json", // counted before a whole listing
		"GET /jobs/?update_time=1795229220":  "jobs_unchanged.200.json",
	}
	for _, tc := range []struct {
		name        string
		watch       Watch
		nodes, jobs bool
	}{
		{"nodes", WatchNodes, true, false},
		{"jobs", WatchJobs, false, true},
		{"default: both", 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rp := newReplay(t, routes)
			cache := NewCache(c, CacheConfig{PollInterval: 50 * time.Millisecond, Watch: tc.watch})
			runSynced(t, cache)
			// Several polls later, still fresh and still only its kinds asked.
			require.Eventually(t, func() bool {
				return rp.count("GET /nodes/?update_time=1795229216")+rp.count("GET /jobs/?update_time=1795229220") >= 3
			}, 10*time.Second, 10*time.Millisecond, "no delta polls")
			cache.RefreshJobs()
			time.Sleep(100 * time.Millisecond)
			require.False(t, cache.Stale())
			require.False(t, cache.LastSync().IsZero())

			_, nodeErr := cache.Node("gpu-0")
			_, jobErr := cache.Job(1)
			if tc.nodes {
				require.NoError(t, nodeErr)
				require.Positive(t, rp.count("GET /nodes/"))
			} else {
				require.ErrorIs(t, nodeErr, ErrNotWatched)
				require.NotErrorIs(t, nodeErr, ErrNotFound)
				require.Zero(t, rp.count("GET /nodes/")+rp.count("GET /nodes/?update_time=1795229216"), "listed nodes it does not watch")
			}
			if tc.jobs {
				require.NoError(t, jobErr)
			} else {
				require.ErrorIs(t, jobErr, ErrNotWatched)
				require.Zero(t, rp.count("GET /jobs/")+rp.count("GET /jobs/?update_time=1795229220"), "listed jobs it does not watch")
			}
		})
	}
}

// runSynced runs cache until the test ends and waits for its first sync.
func runSynced(t *testing.T, cache *Cache) {
	t.Helper()
	ctx := runAsync(t, cache)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	require.NoError(t, cache.WaitSynced(wctx))
}

// runAsync runs cache until the test ends; the context is Run's.
func runAsync(t *testing.T, cache *Cache) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}
