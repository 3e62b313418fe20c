package slurmrest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Between the full listings JobListEvery asks for, a poll asks /jobs/state
// first: when it shows the jobs and states the cache holds, no listing goes
// out and the cache stays fresh; when it shows anything else (here: no
// jobs where the cache holds one), every poll lists as before. A refresh
// always lists.
func TestCacheListsJobsOnlyWhenTheirStatesChanged(t *testing.T) {
	const delta = "GET /jobs/?update_time=1795229220"
	for _, tc := range []struct {
		name, states, delta string
		skips               bool
	}{
		// job 1 RUNNING, as jobs.200.json
		{"same jobs and states", "jobs_state.200.json", "jobs_unchanged.200.json", true},
		// no job; each delta lists job 1 again
		{"another set of jobs", "jobs_unchanged.200.json", "jobs.200.json", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rp := newReplay(t, map[string]string{
				"GET /jobs/":       "jobs.200.json",
				delta:              tc.delta,
				"GET /jobs/state/": tc.states,
			})
			cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, JobListEvery: time.Hour, Watch: WatchJobs})
			runSynced(t, cache)
			require.Eventually(t, func() bool { return rp.count("GET /jobs/state/") >= 5 }, 10*time.Second, 5*time.Millisecond)
			require.False(t, cache.Stale())
			j, err := cache.Job(1)
			require.NoError(t, err)
			require.Equal(t, JobRunning, j.State.Base())
			if tc.skips {
				require.Zero(t, rp.count(delta), "listed jobs though their states had not changed")
				cache.RefreshJobs()
				require.Eventually(t, func() bool { return rp.count(delta) >= 1 }, 10*time.Second, 5*time.Millisecond,
					"a refresh did not list")
			} else {
				require.GreaterOrEqual(t, rp.count(delta), 4, "states differed, yet polls did not list")
			}
			require.Equal(t, 1, rp.count("GET /jobs/"), "one first listing in full")
		})
	}
}

// On an idle cluster the update_time delta answers "unchanged" with an
// empty body, cheaper than any probe: once a due listing found nothing
// changed, polls go back to deltas and ask /jobs/state nothing.
func TestCacheAsksNoJobStatesWhileNothingChanges(t *testing.T) {
	const delta = "GET /jobs/?update_time=1795229220"
	c, rp := newReplay(t, map[string]string{
		"GET /jobs/":       "jobs.200.json",
		delta:              "jobs_unchanged.200.json",
		"GET /jobs/state/": "jobs_state.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, JobListEvery: 100 * time.Millisecond, Watch: WatchJobs})
	runSynced(t, cache)
	require.Eventually(t, func() bool { return rp.count(delta) >= 3 }, 10*time.Second, 5*time.Millisecond)
	probes := rp.count("GET /jobs/state/")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, probes, rp.count("GET /jobs/state/"), "probed while deltas answered unchanged")
	require.False(t, cache.Stale())
}

// With array jobs queued, /jobs/state names each pending task of an
// array's own record apart ("4_0", "4_2", "4_3" for job 4) and a task with
// a record of its own as "5_1" (recorded from 24.11.5 and 26.05.5). The
// probe still reads, and finds the listing's five records in the states
// it holds: no listing goes out. Before, the probe was refused ("job id
// "4_0" is not a job id") and every poll listed every job.
func TestCacheProbeReadsArrayJobs(t *testing.T) {
	for version, updated := range map[string]string{"v0.0.42": "1796612402", "v0.0.44": "1796612477"} {
		t.Run(version, func(t *testing.T) {
			delta := "GET /jobs/?update_time=" + updated
			c, rp := newReplayVersion(t, version, map[string]string{
				"GET /jobs/":       "jobs_array.200.json",
				delta:              "jobs_unchanged.200.json",
				"GET /jobs/state/": "jobs_state_array.200.json",
			})
			cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, JobListEvery: time.Hour, Watch: WatchJobs})
			runSynced(t, cache)
			require.Eventually(t, func() bool { return rp.count("GET /jobs/state/") >= 5 }, 10*time.Second, 5*time.Millisecond)
			require.False(t, cache.Stale())
			require.Zero(t, rp.count(delta), "listed jobs though their states had not changed")
			for id, state := range map[uint32]string{4: JobPending, 5: JobPending, 2: JobCancelled} {
				j, err := cache.Job(id)
				require.NoError(t, err)
				require.Equal(t, state, j.State.Base(), "job %d", id)
			}
		})
	}
}
