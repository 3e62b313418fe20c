package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/onepool/onepool/slurmrest"
)

func TestMovedJobs(t *testing.T) {
	pending, running := slurmrest.JobState{"PENDING"}, slurmrest.JobState{"RUNNING"}
	known := map[uint32]slurmrest.JobState{1: nil, 2: nil, 3: pending, 4: running, 5: running, 6: running}
	states := []slurmrest.JobStateEntry{
		{ID: 1, State: pending}, // new, still pending: the cache tells
		{ID: 2, State: running}, // new and started: read it
		{ID: 3, State: running}, // started
		{ID: 4, State: running}, // unchanged
		{ID: 5, State: slurmrest.JobState{"CANCELLED", "COMPLETING"}}, // ended
		{ID: 9, State: running}, // not asked about
		// 6 not listed: purged; the cache tells
	}
	assert.Equal(t, []uint32{2, 3, 5}, movedJobs(known, states))
}

// The watch asks about new jobs every tick, about every live job only
// on a WatchInterval tick, and about nothing when onepool owns no live job.
func TestOwnedJobs(t *testing.T) {
	f := newCoreFixture(t)
	assert.Empty(t, f.core.ownedJobs(true), "no onepool job: nothing to ask")

	f.core.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	assert.Equal(t, map[uint32]slurmrest.JobState{7: {"RUNNING"}}, f.core.ownedJobs(true))
	assert.Empty(t, f.core.ownedJobs(false), "a running job waits for the WatchInterval tick")

	f.core.mu.Lock()
	f.core.starting[8] = time.Now()
	f.core.starting[9] = time.Now().Add(-time.Minute)
	f.core.mu.Unlock()
	assert.Equal(t, map[uint32]slurmrest.JobState{8: nil}, f.core.ownedJobs(false), "a job submitted moments ago is asked every tick; an old one no longer")

	f.core.observe(f.job(7, "COMPLETED", "gpu-1"))
	assert.Equal(t, map[uint32]slurmrest.JobState{8: nil}, f.core.ownedJobs(true), "an ended job is not asked again")
}

// While onepool owns a running job the watch has the cache list changed
// jobs (a preemption shows only there) at most every runningRefresh; with
// no running job it asks the cache for nothing more.
func TestWatchRefreshesTheCacheOnlyWhileAJobRuns(t *testing.T) {
	f := newCoreFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.core.watchOwned(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(3 * f.core.args.WatchInterval.Duration)
	assert.Zero(t, f.jobs.refreshes.Load(), "no onepool job: the cache is not asked")

	f.core.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	assert.Eventually(t, func() bool { return f.jobs.refreshes.Load() >= 2 }, 10*time.Second, 10*time.Millisecond,
		"a running job: the cache lists changed jobs again and again")

	f.core.observe(f.job(7, "COMPLETED", "gpu-1"))
	time.Sleep(runningRefresh + f.core.args.WatchInterval.Duration) // a refresh already decided may land
	n := f.jobs.refreshes.Load()
	time.Sleep(2 * runningRefresh)
	assert.Equal(t, n, f.jobs.refreshes.Load(), "the job ended: no more refreshes")
}

func TestRunningJobs(t *testing.T) {
	for _, tc := range []struct {
		known map[uint32]slurmrest.JobState
		want  []uint32
	}{
		{nil, nil},
		{map[uint32]slurmrest.JobState{1: nil}, nil},
		{map[uint32]slurmrest.JobState{1: {"PENDING"}, 2: nil}, nil},
		{map[uint32]slurmrest.JobState{1: {"PENDING"}, 2: {"RUNNING"}}, []uint32{2}},
		{map[uint32]slurmrest.JobState{3: {"RUNNING", "COMPLETING"}, 2: {"RUNNING"}}, []uint32{2, 3}},
	} {
		assert.Equal(t, tc.want, runningJobs(tc.known), "%v", tc.known)
	}
}

func TestReadEach(t *testing.T) {
	for _, tc := range []struct {
		running, listed int
		want            bool
	}{
		{0, 500, false},   // nothing runs: nothing to read
		{1, 0, false},     // the cache holds nothing yet: its listing is cheap
		{32, 350, true},   // a few pods among many jobs: one by one
		{200, 350, false}, // most jobs are onepool's: one listing
		{2, 10, true},
		{3, 10, false},
	} {
		assert.Equal(t, tc.want, readEach(tc.running, tc.listed), "%d running, %d listed", tc.running, tc.listed)
	}
}

// With few running placeholders among many jobs, the watch reads each
// running job in full (no cache listing) every runningRefresh, so Slurm
// beginning a preemption evicts the pod without waiting for a listing.
func TestWatchReadsRunningJobsOneByOneWhenCheaper(t *testing.T) {
	f := newCoreFixture(t)
	f.jobs.count.Store(1000)
	j := f.job(7, slurmrest.JobRunning, "gpu-1")
	f.slurm.jobs = map[uint32]*slurmrest.Job{7: &j}
	f.core.observe(j)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.core.watchOwned(ctx) }()
	defer func() { cancel(); <-done }()
	go func() {
		for {
			key, quit := f.core.lifeQ.Get()
			if quit {
				return
			}
			_, _ = f.core.reconcile(ctx, key)
			f.core.lifeQ.Done(key)
		}
	}()

	f.slurm.mu.Lock()
	preempted := j
	preempted.QOS, preempted.PreemptTime, preempted.EndTime = "low", time.Now(), time.Now().Add(30*time.Second)
	f.slurm.jobs[7] = &preempted
	f.slurm.mu.Unlock()
	assert.Eventually(t, func() bool { return len(evictions(f)) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the preemption was not seen from the job's own record")
	assert.Zero(t, f.jobs.refreshes.Load(), "the cache listed jobs though reading one was cheaper")
}
