package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/slurmrest"
)

func (f *coreFixture) evicted() bool {
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			return true
		}
	}
	return false
}

// slurmctld SIGKILLed before it saved its state forgets a job it had just
// started. The soak found the pod staying on GPUs Slurm no longer held for
// it: the job vanished from Slurm's listing while last seen RUNNING, and
// nothing asked again. Now Slurm is asked, and a job it denies is missing:
// the pod is evicted. A job Slurm still has stays.
func TestCoreEvictsAPodWhoseRunningJobSlurmLost(t *testing.T) {
	for _, stillThere := range []bool{false, true} {
		f := newCoreFixture(t)
		j := f.job(7, slurmrest.JobRunning, "gpu-1")
		f.core.book.observe(j)
		if stillThere {
			f.slurm.jobs = map[uint32]*slurmrest.Job{7: &j}
		}
		f.core.book.forget(j) // the listing lacks it
		_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
		require.NoError(t, err)
		assert.Equal(t, !stillThere, f.evicted(), "job still in Slurm: %v", stillThere)
		assert.Empty(t, f.slurm.cancelled)
	}
}

// After such a loss slurmctld gives the lost job's id to a new job (the
// soak saw job 5625 given to a second pod while the first still held it).
// The first pod's job is gone: it is evicted; the second keeps the job.
func TestCoreAJobIDGivenAgainMeansTheOldJobIsGone(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	other := podWith(nil, 1, "", "")
	other.Name, other.UID = "q", types.UID("u2")
	other.Spec.SchedulerName = "onepool"
	f.core.podChanged(nil, other)
	reused := slurmrest.Job{ID: 7, Comment: f.core.proof.comment(ownerOf(other), ""), State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-1"}
	f.core.book.observe(reused)

	_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
	require.NoError(t, err)
	assert.True(t, f.evicted(), "the pod whose job Slurm lost is evicted")
	assert.Empty(t, f.slurm.cancelled, "job 7 is the other pod's now: never cancelled for the first")
	assert.Equal(t, uint32(7), f.core.rec.s.places[ownerOf(other).key()].jobID)
	assert.Equal(t, ownerOf(other).key(), f.core.rec.s.byJob[7])
}
