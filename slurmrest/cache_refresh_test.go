package slurmrest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A job listing asked with RefreshJobs goes out at once, long before the
// next tick, and lists the jobs alone (the replay refuses any other
// request); asks made while one waits count once; Run stops with ctx.
func TestCacheRefreshJobsListsJobsBeforeTheTick(t *testing.T) {
	const delta = "GET /jobs/?update_time=1795229220" // jobs.200.json's last_update
	c, rp := newReplay(t, map[string]string{
		"GET /nodes/": "nodes.200.json",
		"GET /jobs/":  "jobs.200.json",
		delta:         "jobs_unchanged.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: time.Hour})
	// Asked three times before Run takes any: one listing, after the
	// first full one.
	for range 3 {
		cache.RefreshJobs()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cache.Run(ctx) }()
	defer func() { cancel(); <-done }()

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	require.NoError(t, cache.WaitSynced(wctx))
	require.Eventually(t, func() bool { return rp.count(delta) == 1 }, 10*time.Second, 10*time.Millisecond,
		"the refresh's job listing never went out")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, rp.count(delta), "asks made while one waited listed more than once")
	j, err := cache.Job(1)
	require.NoError(t, err)
	require.Equal(t, JobRunning, j.State.Base())

	cache.RefreshJobs()
	require.Eventually(t, func() bool { return rp.count(delta) == 2 }, 10*time.Second, 10*time.Millisecond,
		"a later refresh did not list again")
	require.Equal(t, 1, rp.count("GET /nodes/"), "a refresh listed nodes")

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
}

// count is how many requests matched key ("METHOD /path?query").
func (rp *replay) count(key string) int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	n := 0
	for _, r := range rp.seen {
		k := r.Method + " " + rp.path(r.URL.Path)
		if r.URL.RawQuery != "" {
			k += "?" + r.URL.RawQuery
		}
		if k == key {
			n++
		}
	}
	return n
}
