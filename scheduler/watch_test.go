package scheduler

import (
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
