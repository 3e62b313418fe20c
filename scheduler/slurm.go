package scheduler

import (
	"context"
	"errors"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is what the scheduler asks of slurmrestd directly; reads of the
// whole cluster go through the cache instead.
type Slurm interface {
	SubmitJob(ctx context.Context, j slurmrest.JobSubmit) (uint32, error)
	CancelJob(ctx context.Context, id uint32) error
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
	JobStates(ctx context.Context, ids []uint32) ([]slurmrest.JobStateEntry, error)
}

// JobCache is the scheduler's view of Slurm's jobs: it answers ErrStale
// rather than old data.
type JobCache interface {
	Job(id uint32) (slurmrest.Job, error)
	Stale() bool
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
