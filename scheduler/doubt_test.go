package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// A submission whose answer never came whole (the body cut, a timeout, a
// proxy's 503) may have made the job. The soak found the scheduler making
// a new job at each retry: six RUNNING placeholder jobs for one pod. It
// now waits for a listing of Slurm's jobs begun after the failure, adopts
// the job it finds there, and submits again only when there is none.
func TestCoreSubmitsAgainOnlyAfterAListingShowsNoJob(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		inDoubt    bool
		jobInSlurm bool // the failed submission did make the job
	}{
		{"cut body, the job was made", fmt.Errorf("submit job: %w", slurmrest.ErrBadResponse), true, true},
		{"cut body, no job", fmt.Errorf("submit job: %w", slurmrest.ErrBadResponse), true, false},
		{"unreachable", fmt.Errorf("submit job: %w", slurmrest.ErrUnreachable), true, false},
		{"a proxy's 503", &slurmrest.APIError{Op: "submit job", StatusCode: 503, Kind: slurmrest.ErrBadResponse}, true, false},
		{"Slurm's own refusal for now", &slurmrest.APIError{Op: "submit job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
			Errors: []slurmrest.SlurmError{{Errno: 1007, Error: "Protocol authentication error"}}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCoreFixture(t)
			f.jobs.synced()
			key := ownerOf(f.pod).key()
			f.slurm.reject = tc.err
			f.core.Place(f.pod)
			q, _ := f.core.submitQ.Get()
			require.ErrorIs(t, f.core.sub.submit(context.Background(), q), errRetry)
			f.core.submitQ.Done(q)
			require.Len(t, f.slurm.submitted, 1)
			f.slurm.reject = nil

			// Retried before any listing began after the failure.
			err := f.core.sub.submit(context.Background(), key)
			if !tc.inDoubt {
				require.NoError(t, err)
				assert.Len(t, f.slurm.submitted, 2, "Slurm said no: nothing was made, submit again")
				return
			}
			require.ErrorIs(t, err, errRetry)
			assert.Len(t, f.slurm.submitted, 1, "submitted again while the first may exist")
			assert.Positive(t, f.jobs.refreshes.Load(), "a listing is asked for")
			assert.Contains(t, f.core.Place(f.pod).Message, "whether the last submission made a job")

			time.Sleep(time.Millisecond)
			f.jobs.synced() // the listing began after the failure
			if tc.jobInSlurm {
				f.core.book.observe(f.job(7, slurmrest.JobPending, ""))
			}
			require.NoError(t, f.core.sub.submit(context.Background(), key))
			if tc.jobInSlurm {
				assert.Len(t, f.slurm.submitted, 1, "the job the cut answer made is adopted, no second one")
			} else {
				assert.Len(t, f.slurm.submitted, 2, "no job in the listing: submitted again")
			}
		})
	}
}
