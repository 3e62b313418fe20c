package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is what the scheduler asks of slurmrestd directly; reads of the
// whole cluster go through the cache instead.
type Slurm interface {
	SubmitJob(ctx context.Context, j slurmrest.JobSubmit) (uint32, error)
	AllocateNow(ctx context.Context, j slurmrest.JobSubmit) (uint32, error)
	CancelJob(ctx context.Context, id uint32) error
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
	JobStates(ctx context.Context, ids []uint32) ([]slurmrest.JobStateEntry, error)
	UpdateJob(ctx context.Context, id uint32, u slurmrest.JobUpdate) error
}

// JobCache is the scheduler's view of Slurm's jobs: it answers ErrStale
// rather than old data.
type JobCache interface {
	Job(id uint32) (slurmrest.Job, error)
	Stale() bool
	// RefreshJobs asks for a listing of changed jobs now, not at the
	// next poll, without waiting for it.
	RefreshJobs()
	// JobsListedAt is when the last good listing of Slurm's jobs began:
	// every job Slurm had then has been seen.
	JobsListedAt() time.Time
	// Track has the cache follow a job just submitted, ahead of any
	// listing.
	Track(id uint32)
}

// rejected says whether Slurm refused a submission for what it asks
// (invalid QOS, partition, account, size): asking again unchanged fails
// again. Communication and authentication failures are not rejections.
func rejected(err error) bool {
	var ae *slurmrest.APIError
	if !errors.Is(err, slurmrest.ErrSlurm) || !errors.As(err, &ae) || len(ae.Errors) == 0 {
		return false
	}
	for _, e := range ae.Errors {
		// 2000-2999 are ESLURM_* errors about the request itself; lower
		// numbers are protocol and communication errors.
		if e.Errno < 2000 || e.Errno > 2999 {
			return false
		}
	}
	return true
}

// notNow says whether Slurm refused an immediate allocation only for now:
// no free resources, a higher-priority job waits, the partition cannot
// take it at the moment, or a QOS/association limit would hold it (a
// queued job would wait for each of these rather than be rejected).
func notNow(err error) bool {
	var ae *slurmrest.APIError
	if !errors.As(err, &ae) || len(ae.Errors) == 0 {
		return false
	}
	for _, e := range ae.Errors {
		switch e.Errno {
		case slurmrest.ErrnoNodesBusy, slurmrest.ErrnoNotTopPriority, slurmrest.ErrnoPartConfigUnavailable,
			slurmrest.ErrnoAccountingPolicy, slurmrest.ErrnoPartitionNotAvail:
		default:
			return false
		}
	}
	return true
}

// refusedNow says whether Slurm itself answered an allocation request with
// errors: nothing was granted (2016 nodes busy, not the top-priority job,
// or a request it would never place; the batch job that follows says
// which). No answer, or one onepool cannot read, may hide a grant.
func refusedNow(err error) bool {
	var ae *slurmrest.APIError
	return errors.As(err, &ae) && ae.StatusCode != 0 && len(ae.Errors) > 0 &&
		!errors.Is(err, slurmrest.ErrUnreachable) && !errors.Is(err, slurmrest.ErrBadResponse)
}
