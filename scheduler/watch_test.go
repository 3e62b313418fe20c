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
	assert.Empty(t, f.core.watch.st.owned(true), "no onepool job: nothing to ask")

	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	assert.Equal(t, map[uint32]slurmrest.JobState{7: {"RUNNING"}}, f.core.watch.st.owned(true))
	assert.Empty(t, f.core.watch.st.owned(false), "a running job waits for the WatchInterval tick")

	f.core.rec.s.mu.Lock()
	f.core.rec.s.starting[8] = time.Now()
	f.core.rec.s.starting[9] = time.Now().Add(-time.Minute)
	f.core.rec.s.mu.Unlock()
	assert.Equal(t, map[uint32]slurmrest.JobState{8: nil}, f.core.watch.st.owned(false), "a job submitted moments ago is asked every tick; an old one no longer")

	f.core.book.observe(f.job(7, "COMPLETED", "gpu-1"))
	assert.Equal(t, map[uint32]slurmrest.JobState{8: nil}, f.core.watch.st.owned(true), "an ended job is not asked again")
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

func TestTakeTurns(t *testing.T) {
	ids := []uint32{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		turn, n  int
		want     []uint32
		nextTurn int
	}{
		{0, 32, ids, 0},              // all fit: every one each time
		{0, 2, []uint32{1, 2}, 2},    // the first two
		{4, 2, []uint32{5, 1}, 1},    // wrapping
		{7, 3, []uint32{3, 4, 5}, 0}, // a turn past the end (ids went) wraps
		{0, 5, ids, 0},               // exactly n
	} {
		got, next := takeTurns(ids, tc.turn, tc.n)
		assert.Equal(t, tc.want, got, "turn %d of %d", tc.turn, tc.n)
		assert.Equal(t, tc.nextTurn, next, "next turn after %d of %d", tc.turn, tc.n)
	}
}

// The watch reads each running job in full (never a cache listing) every
// runningRefresh, so Slurm beginning a preemption evicts the pod without
// waiting for a listing.
func TestWatchReadsRunningJobsOneByOne(t *testing.T) {
	f := newCoreFixture(t)
	j := f.job(7, slurmrest.JobRunning, "gpu-1")
	f.slurm.jobs = map[uint32]*slurmrest.Job{7: &j}
	f.core.book.observe(j)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.core.watch.run(ctx) }()
	defer func() { cancel(); <-done }()
	go func() {
		for {
			key, quit := f.core.lifeQ.Get()
			if quit {
				return
			}
			_, _ = f.core.life.reconcile(ctx, key)
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
	assert.Zero(t, f.jobs.refreshes.Load(), "the watch had the cache list jobs")
}
