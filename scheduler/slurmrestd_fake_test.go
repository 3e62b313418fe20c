package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// The integration suite's Slurm answers with recorded slurmrestd answers
// edited to hold its jobs: slurmrest's client must read them as it reads
// the real ones, for both API versions onepool speaks. This is what makes
// the suite's Slurm side the real decoding path, not a stand-in.
func TestFakeSlurmrestdSpeaksThroughTheRealClient(t *testing.T) {
	for _, version := range slurmrest.APIVersions {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeSlurmrestd(t, version)
			c, err := slurmrest.New(slurmrest.Config{URL: f.srv.URL, TokenFile: f.tokenFile(t), APIVersion: version, Timeout: 5 * time.Second})
			require.NoError(t, err)
			user, err := c.OwnUser()
			require.NoError(t, err)
			assert.Equal(t, tokenUser, user, "the token's sun claim")

			job := slurmrest.JobSubmit{Name: "onepool/ns/p", Comment: "onepool:pod=ns/p;uid=u1;user=team-a;sig=x", Script: "#!/bin/bash\nsleep 1\n",
				Partition: "main", QOS: "normal", Nodes: "2", Tasks: 2, TresPerNode: "gres/gpu:2", TimeLimit: 90 * time.Minute, NoRequeue: true}
			id, err := c.SubmitJob(slurmrest.AsUser(ctx, "team-a"), job)
			require.NoError(t, err)
			asks := f.asked().submitsFor("onepool/ns/p")
			require.Len(t, asks, 1)
			assert.Equal(t, "team-a", asks[0].User, "X-SLURM-USER-NAME")
			assert.Equal(t, "2", asks[0].Job.Nodes)
			assert.Equal(t, int64(90), asks[0].Job.TimeLimit.Number, "minutes")
			require.NotNil(t, asks[0].Job.Requeue)
			assert.False(t, *asks[0].Job.Requeue)

			pending, err := c.GetJob(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, slurmrest.JobPending, pending.State.Base())
			assert.Equal(t, "team-a", pending.User, "the job runs as the user the request named")
			assert.Equal(t, job.Comment, pending.Comment)
			assert.Empty(t, pending.Nodes)

			f.does().start(id, "gpu-a", "gpu-b")
			states, err := c.JobStates(ctx, []uint32{id, 424242})
			require.NoError(t, err)
			require.Len(t, states, 1, "an id Slurm does not know is left out")
			assert.Equal(t, slurmrest.JobRunning, states[0].State.Base())
			running, err := c.GetJob(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, "gpu-a,gpu-b", running.Nodes)
			idx, err := running.GPUIndexes("gpu-b")
			require.NoError(t, err)
			assert.Equal(t, []int{0, 1}, idx, "gres_detail paired with job_resources' nodes")

			list, err := c.ListJobs(ctx, time.Time{})
			require.NoError(t, err)
			require.Len(t, list.Jobs, 1)
			unchanged, err := c.ListJobs(ctx, list.LastUpdate.Add(time.Second))
			require.NoError(t, err)
			assert.Nil(t, unchanged, "no change since: the recorded empty delta")

			f.does().preempt(id, 30*time.Second)
			preempted, err := c.GetJob(ctx, id)
			require.NoError(t, err)
			assert.False(t, preempted.PreemptTime.IsZero())
			assert.WithinDuration(t, preempted.PreemptTime.Add(30*time.Second), preempted.EndTime, time.Second)

			require.NoError(t, c.CancelJob(ctx, id))
			assert.True(t, f.asked().cancelled(id))
			assert.Equal(t, "CANCELLED", f.asked().state(id))
			assert.ErrorIs(t, c.CancelJob(ctx, 424242), slurmrest.ErrNotFound)
			_, err = c.GetJob(ctx, 424242)
			assert.ErrorIs(t, err, slurmrest.ErrNotFound)

			job.Script = ""
			_, err = c.AllocateNow(ctx, job)
			var ae *slurmrest.APIError
			require.True(t, errors.As(err, &ae), "a refused allocation: %v", err)
			assert.True(t, notNow(err) && refusedNow(err), "the recorded 'nodes are busy' is a refusal for now: %v", err)
			f.does().grantIn("main", "gpu-c", "gpu-d")
			granted, err := c.AllocateNow(ctx, job)
			require.NoError(t, err)
			g, err := c.GetJob(ctx, granted)
			require.NoError(t, err)
			assert.Equal(t, slurmrest.JobRunning, g.State.Base())
			assert.Equal(t, "gpu-c,gpu-d", g.Nodes)
			f.does().refuseQOS("gold")
			job.QOS, job.Script = "gold", "#!/bin/bash\n"
			_, err = c.SubmitJob(ctx, job)
			require.True(t, errors.As(err, &ae), "a refused submission: %v", err)
			assert.Equal(t, slurmrest.ErrnoInvalidQOS, ae.FirstErrno())
			assert.True(t, rejected(err), "refused for what it asks: %v", err)
			assert.Empty(t, f.asked().unserved())
		})
	}
}
