package slurmrest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	routeJobs      = "GET /jobs/"
	routeJob1State = "GET /jobs/state/?job_id=1"
	routeJob1      = "GET /job/1"
	routePing      = "GET /ping/"
)

// With FollowJobs, one listing at start and then never again: each poll
// asks /jobs/state for the job the view holds, and a job Slurm stops
// listing is read by id and deleted once Slurm denied it twice. Any
// listing after the first would be an unexpected request (the replay
// fails the test).
func TestCacheFollowsHeldJobsByID(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		routeJobs:      "jobs.200.json", // job 1 RUNNING
		routeJob1State: "jobs_state.200.json",
		routePing:      "ping.200.json",
	})
	cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, Watch: WatchJobs, FollowJobs: true})
	var deleted atomic.Int32
	cache.AddJobHandler(JobHandler{Delete: func(*Job) { deleted.Add(1) }})
	runSynced(t, cache)
	require.Eventually(t, func() bool { return rp.count(routeJob1State) >= 5 }, 10*time.Second, 5*time.Millisecond)
	require.False(t, cache.Stale())
	j, err := cache.Job(1)
	require.NoError(t, err)
	require.Equal(t, JobRunning, j.State.Base())
	require.Zero(t, rp.count(routeJob1), "read a job whose state did not move")
	require.Zero(t, rp.count(routePing), "pinged while following a job")

	// Slurm no longer lists job 1 and denies it (purged after MinJobAge).
	rp.set(routeJob1, "job_unknown.404.json")
	rp.set(routeJob1State, "jobs_unchanged.200.json")
	require.Eventually(t, func() bool { return deleted.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "job 1 never deleted")
	require.GreaterOrEqual(t, rp.count(routeJob1), missesBeforeDelete, "deleted on one denial")
	_, err = cache.Job(1)
	require.ErrorIs(t, err, ErrNotFound)
	// Nothing left to follow: polls ping, so the cache stays fresh.
	require.Eventually(t, func() bool { return rp.count(routePing) >= 2 }, 10*time.Second, 5*time.Millisecond)
	require.False(t, cache.Stale())
	require.Equal(t, 1, rp.count(routeJobs), "listed jobs again")
	require.EqualValues(t, 1, deleted.Load())
}

// KeepJobs: the view holds only the jobs it accepts (the scheduler's:
// onepool's own placeholders); the others are counted, not held. A job
// Track names is followed from its first listing in /jobs/state on, and
// held if kept; one refused is no longer asked about.
func TestCacheKeepsOnlyTheJobsItIsToldTo(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep bool
	}{{"tracked and kept", true}, {"tracked, not kept", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, rp := newReplay(t, map[string]string{
				routeJobs: "jobs.200.json",
				routePing: "ping.200.json",
			})
			cache := NewCache(c, CacheConfig{PollInterval: 20 * time.Millisecond, Watch: WatchJobs, FollowJobs: true})
			var keepOne atomic.Bool
			cache.KeepJobs(func(j *Job) bool { return keepOne.Load() && j.ID == 1 })
			var added atomic.Int32
			cache.AddJobHandler(JobHandler{Add: func(*Job) { added.Add(1) }})
			runSynced(t, cache)
			_, err := cache.Job(1)
			require.ErrorIs(t, err, ErrNotFound, "held a job KeepJobs refused")
			require.Equal(t, 1, cache.JobCount(), "the listing's size, kept or not")
			require.Eventually(t, func() bool { return rp.count(routePing) >= 2 }, 10*time.Second, 5*time.Millisecond)

			keepOne.Store(tc.keep)
			rp.set(routeJob1State, "jobs_state.200.json")
			rp.set(routeJob1, "job_1.200.json")
			cache.Track(1)
			require.Eventually(t, func() bool { return rp.count(routeJob1) == 1 }, 10*time.Second, 5*time.Millisecond, "tracked job never read")
			if tc.keep {
				require.Eventually(t, func() bool { return added.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
				_, err = cache.Job(1)
				require.NoError(t, err)
				states := rp.count(routeJob1State)
				require.Eventually(t, func() bool { return rp.count(routeJob1State) >= states+3 }, 10*time.Second, 5*time.Millisecond,
					"a held job's state is not followed")
			} else {
				pings := rp.count(routePing)
				require.Eventually(t, func() bool { return rp.count(routePing) >= pings+3 }, 10*time.Second, 5*time.Millisecond)
				require.Zero(t, added.Load())
				_, err = cache.Job(1)
				require.ErrorIs(t, err, ErrNotFound)
			}
			require.Equal(t, 1, rp.count(routeJob1), "read the tracked job more than once")
			require.Equal(t, 1, rp.count(routeJobs), "listed jobs again")
		})
	}
}

// A listing gets the time a listing of that size takes: slurmrestd builds
// an answer to its end even when the client gave up, so a listing cut at
// the request timeout and asked again at each poll piles its answers up
// in slurmrestd's memory (seen at 50,000 jobs: 4 to 19 GiB in 5 minutes).
// Here the client's timeout is 100 ms and a refresh answers in 300 ms:
// with 1 s a job for the one job listed, it still succeeds.
func TestCacheGivesAJobListingTheTimeItsSizeTakes(t *testing.T) {
	const delta = "GET /jobs/?update_time=1795229220"
	for _, tc := range []struct {
		name   string
		perJob time.Duration
		ok     bool
	}{{"time for the jobs", time.Second, true}, {"request timeout only", time.Nanosecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, rp := newReplayConfig(t, "v0.0.42", map[string]string{
				routeJobs: "jobs.200.json",
				delta:     "jobs_unchanged.200.json",
			}, func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond })
			cache := NewCache(c, CacheConfig{PollInterval: time.Hour, StaleAfter: 2 * time.Hour, Watch: WatchJobs, JobListPerJob: tc.perJob})
			runSynced(t, cache)
			listed := cache.JobsListedAt()
			rp.mu.Lock()
			rp.delay = map[string]time.Duration{delta: 300 * time.Millisecond}
			rp.mu.Unlock()
			cache.RefreshJobs()
			require.Eventually(t, func() bool { return rp.count(delta) == 1 }, 10*time.Second, 5*time.Millisecond)
			time.Sleep(600 * time.Millisecond)
			require.Equal(t, tc.ok, cache.JobsListedAt().After(listed), "listing succeeded")
		})
	}
}

// After a failed job listing the next waits: PollInterval doubled per
// failure in a row (here 10, 20, 40, ... ms), where it used to list at
// every poll. 50 polls in the time below would ask 50 listings.
func TestCacheBacksOffFailedJobListings(t *testing.T) {
	c, rp := newReplay(t, map[string]string{routeJobs: "html.502.json"})
	cache := NewCache(c, CacheConfig{PollInterval: 10 * time.Millisecond, Watch: WatchJobs})
	runAsync(t, cache)
	time.Sleep(500 * time.Millisecond)
	require.LessOrEqual(t, rp.count(routeJobs), 8, "listings after failures are not spaced")
	require.GreaterOrEqual(t, rp.count(routeJobs), 2, "a failed listing is never asked again")
}

func TestBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	var b backoff
	require.Zero(t, b.until(now))
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		b.done(false, now, time.Second)
		require.Equal(t, want, b.until(now), "failure %d", i+1)
	}
	for range 20 {
		b.done(false, now, time.Second)
	}
	require.Equal(t, maxListBackoff, b.until(now))
	require.Zero(t, b.until(now.Add(maxListBackoff)))
	b.done(true, now, time.Second)
	require.Zero(t, b.until(now))
}

// A listing that ran out of time is given twice as long the next time:
// the queue may have grown since the last listing counted it (here a
// refresh answers in 300 ms, the client's timeout is 100 ms, and one job
// was counted: 100, 200, then 400 ms).
func TestCacheGivesAFailedListingMoreTime(t *testing.T) {
	const delta = "GET /jobs/?update_time=1795229220"
	c, rp := newReplayConfig(t, "v0.0.42", map[string]string{
		routeJobs: "jobs.200.json",
		delta:     "jobs_unchanged.200.json",
	}, func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond })
	cache := NewCache(c, CacheConfig{PollInterval: 10 * time.Millisecond, Watch: WatchJobs, JobListPerJob: time.Nanosecond})
	runSynced(t, cache)
	listed := cache.JobsListedAt()
	rp.mu.Lock()
	rp.delay = map[string]time.Duration{delta: 300 * time.Millisecond}
	rp.mu.Unlock()
	require.Eventually(t, func() bool { return cache.JobsListedAt().After(listed) }, 10*time.Second, 10*time.Millisecond,
		"a listing slower than the request timeout never succeeds")
	require.GreaterOrEqual(t, rp.count(delta), 3, "it succeeded before it ran out of time twice")
}

// The first listing's size is unknown: it is given maxListTime, never cut
// at the request timeout (here a listing answered in 300 ms passes a 100
// ms timeout on its first try). At 50,000 jobs listings cut short and
// asked again piled slurmrestd up to the bench's 14 GiB guard.
func TestCacheGivesTheFirstListingTime(t *testing.T) {
	c, rp := newReplayConfig(t, "v0.0.42", map[string]string{routeJobs: "jobs.200.json"},
		func(cfg *Config) { cfg.Timeout = 100 * time.Millisecond })
	rp.delay = map[string]time.Duration{routeJobs: 300 * time.Millisecond}
	cache := NewCache(c, CacheConfig{PollInterval: time.Hour, StaleAfter: 2 * time.Hour, Watch: WatchJobs})
	runSynced(t, cache)
	require.Equal(t, 1, rp.count(routeJobs), "the first listing was cut short and asked again")
	require.Equal(t, 1, cache.JobCount())
}
