package scheduler

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// What kubectl describe shows while a pod waits, for each stage of its
// placement.
func TestPendingMessage(t *testing.T) {
	job := func(state, reason string) *slurmrest.Job {
		return &slurmrest.Job{ID: 12, State: slurmrest.JobState{state}, Reason: reason}
	}
	for _, tc := range []struct {
		name string
		p    placement
		want string
	}{
		{"nothing asked yet", placement{}, "submitting a placeholder job to Slurm"},
		{"an incomplete gang", placement{waiting: "waiting for PodGroup ns/trio: 1 of its 2 pods exist", err: errors.New("old")},
			"waiting for PodGroup ns/trio: 1 of its 2 pods exist"},
		{"rejected", placement{rejected: true, err: errors.New("Invalid qos specification")},
			"Slurm rejected the placeholder job: Invalid qos specification"},
		{"failed, retrying", placement{err: errors.New("connection refused")},
			"cannot submit the placeholder job to Slurm (retrying): connection refused"},
		{"submitted, not seen", placement{jobID: 12}, "Slurm job 12 submitted; waiting for its state"},
		{"queued", placement{jobID: 12, job: job(slurmrest.JobPending, "Priority")}, "waiting in Slurm's queue: job 12 is PENDING (Priority)"},
		{"ended", placement{jobID: 12, job: job("TIMEOUT", "TimeLimit")}, "Slurm job 12 ended (TIMEOUT, reason TimeLimit); the pod will be evicted"},
		{"ended without a reason", placement{jobID: 12, job: job(slurmrest.JobCancelled, "None")}, "Slurm job 12 ended (CANCELLED); the pod will be evicted"},
		{"missing", placement{jobID: 12, missing: true, job: job(slurmrest.JobRunning, "")}, "Slurm job 12 no longer exists; the pod will be evicted"},
		{"running", placement{jobID: 12, job: job(slurmrest.JobRunning, "")}, "Slurm job 12 is RUNNING"},
		{"suspended", placement{jobID: 12, job: job("SUSPENDED", "Preempted")}, "Slurm job 12 is SUSPENDED, reason Preempted"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.p.pendingMessage()) })
	}
}

// setJob reports the changes that must wake the pods (state, reason, a
// first sight) and reads the allocation once the job runs.
func TestPlacementSetJob(t *testing.T) {
	p := newPlacement(owner{Kind: kindPodGroup, Namespace: "ns", Name: "trio"})
	pending := slurmrest.Job{ID: 5, State: slurmrest.JobState{slurmrest.JobPending}, Reason: "Resources"}
	changed, err := p.setJob(pending)
	require.NoError(t, err)
	assert.True(t, changed, "first sight")
	changed, _ = p.setJob(pending)
	assert.False(t, changed, "the same again")
	pending.Reason = "Priority"
	changed, _ = p.setJob(pending)
	assert.True(t, changed, "a new reason is a new message")
	assert.Empty(t, p.nodes)

	running := slurmrest.Job{ID: 5, State: slurmrest.JobState{slurmrest.JobRunning}, Reason: "Priority", Nodes: "gpu-[1-2],cpu-7"}
	changed, err = p.setJob(running)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"gpu-1", "gpu-2", "cpu-7"}, p.nodes, "Slurm's hostlist, in its order")
	running.Nodes = "gpu-9"
	_, _ = p.setJob(running)
	assert.Equal(t, []string{"gpu-1", "gpu-2", "cpu-7"}, p.nodes, "the allocation is read once")

	bad := newPlacement(owner{Namespace: "ns", Name: "p"})
	changed, err = bad.setJob(slurmrest.Job{ID: 6, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-[1-"})
	assert.Error(t, err, "a hostlist onepool cannot read")
	assert.True(t, changed)
	assert.Empty(t, bad.nodes)
}

// A job given back (started on a cordoned node) is queued for its cancel
// and never taken again; the placement is as new.
func TestPlacementAbandon(t *testing.T) {
	p := newPlacement(owner{Namespace: "ns", Name: "p", UID: "u1"})
	p.jobID, p.missing, p.nodes = 7, true, []string{"gpu-1"}
	p.job = &slurmrest.Job{ID: 7}
	p.assigned["u1"] = "gpu-1"
	p.abandon()
	assert.Zero(t, p.jobID)
	assert.Nil(t, p.job)
	assert.Empty(t, p.nodes)
	assert.Empty(t, p.assigned)
	assert.False(t, p.missing)
	assert.Equal(t, []uint32{7}, p.extra)
	assert.Equal(t, []uint32{7}, p.abandoned)
	assert.False(t, p.ended())
}
