package scheduler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// submitOnce runs one submission of the fixture's pod as a submit worker.
func (f *coreFixture) submitOnce(t *testing.T) error {
	t.Helper()
	f.core.Place(f.pod)
	key, _ := f.core.submitQ.Get()
	defer f.core.submitQ.Done(key)
	return f.core.sub.submit(context.Background(), key)
}

func TestCorePlacesAtOnceWhenSlurmGrantsAnAllocation(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true
	f.slurm.allocate = func(slurmrest.JobSubmit) (uint32, error) { return 55, nil }
	granted := f.job(55, slurmrest.JobRunning, "gpu-1")
	f.slurm.jobs = map[uint32]*slurmrest.Job{55: &granted}

	require.NoError(t, f.submitOnce(t))
	require.Len(t, f.slurm.allocated, 1)
	assert.Empty(t, f.slurm.allocated[0].Script, "an allocation runs no script")
	assert.Equal(t, f.core.proof.comment(ownerOf(f.pod), ""), f.slurm.allocated[0].Comment, "a restarted scheduler finds it by its comment")
	assert.Empty(t, f.slurm.submitted, "no batch job besides the allocation")
	assert.Equal(t, decision{Node: "gpu-1"}, f.core.Place(f.pod), "bound without waiting for a poll")
	assert.Contains(t, f.woken, f.pod.Name)
}

func TestCoreQueuesABatchPlaceholderWhenSlurmCannotPlaceNow(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true // f.slurm.allocate nil: "Requested nodes are busy"

	require.NoError(t, f.submitOnce(t))
	require.Len(t, f.slurm.allocated, 1)
	require.Len(t, f.slurm.submitted, 1, "refused now: queued as a batch placeholder")
	assert.Contains(t, f.slurm.submitted[0].Script, "holds this allocation until the pod is gone")
	assert.Contains(t, f.core.Place(f.pod).Message, "Slurm job 101 submitted")
}

// An allocation request that got no answer may have been granted: no
// batch job follows it; the submission is retried (and the cache adopts a
// granted allocation by its comment meanwhile).
func TestCoreDoesNotQueueAfterAnAllocationWithoutAnswer(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true
	f.slurm.allocate = func(slurmrest.JobSubmit) (uint32, error) {
		return 0, &slurmrest.APIError{Op: "allocate job", Kind: slurmrest.ErrUnreachable, Err: context.DeadlineExceeded}
	}
	err := f.submitOnce(t)
	require.ErrorIs(t, err, errRetry)
	assert.Empty(t, f.slurm.submitted)

	// Slurm had granted it: the cache's listing brings it, and the next
	// try submits nothing.
	f.core.book.observe(f.job(60, slurmrest.JobRunning, "gpu-1"))
	require.NoError(t, f.core.sub.submit(context.Background(), ownerOf(f.pod).key()))
	assert.Len(t, f.slurm.allocated, 1)
	assert.Empty(t, f.slurm.submitted)
	assert.Equal(t, decision{Node: "gpu-1"}, f.core.Place(f.pod))
}

func TestRefusedNow(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nodes busy (2016)", busy, true},
		{"not a Slurm answer", errors.New("boom"), false},
		{"no answer", &slurmrest.APIError{Kind: slurmrest.ErrUnreachable, Err: context.DeadlineExceeded}, false},
		{"an answer onepool cannot read", &slurmrest.APIError{StatusCode: 200, Kind: slurmrest.ErrBadResponse,
			Errors: []slurmrest.SlurmError{{Errno: 2016}}}, false},
		{"HTTP 500 without Slurm errors", &slurmrest.APIError{StatusCode: 500, Kind: slurmrest.ErrSlurm}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, refusedNow(tc.err)) })
	}
}

// Until the scheduler has read Slurm's jobs, the release endpoint cannot
// tell an unknown job from one whose pods live: it says so (503), and the
// release epilog keeps asking rather than letting the GPUs go.
func TestReleaseAnswersUnavailableUntilSynced(t *testing.T) {
	f := newCoreFixture(t)
	f.core.rec.s.synced = false
	srv := httptest.NewServer(f.core.rel.handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/placeholders/77")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	f.core.rec.s.synced = true
	resp, err = http.Get(srv.URL + "/v1/placeholders/77")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "synced: a job onepool does not know")
}

// Slurm keeps every refused allocation as a FAILED job: after a refusal,
// and while one of onepool's jobs of the partition waits in the queue, a
// pod goes straight to the queue.
func TestCoreAsksNoAllocationWhereSlurmJustRefusedOrOnepoolWaits(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true
	require.NoError(t, f.submitOnce(t)) // refused: queued as job 101
	require.Len(t, f.slurm.allocated, 1)
	assert.False(t, f.core.sub.st.mayAllocateNow("main"), "refused moments ago")
	assert.True(t, f.core.sub.st.mayAllocateNow("other"), "another partition")

	f.core.rec.s.mu.Lock()
	f.core.rec.s.refusedAt["main"] = time.Now().Add(-time.Minute)
	f.core.rec.s.mu.Unlock()
	queued := f.job(101, slurmrest.JobPending, "")
	queued.Partition = "main"
	f.core.book.observe(queued)
	assert.False(t, f.core.sub.st.mayAllocateNow("main"), "onepool's job 101 waits in main's queue")
	queued.State = slurmrest.JobState{slurmrest.JobRunning}
	queued.Nodes = "gpu-1"
	f.core.book.observe(queued)
	assert.True(t, f.core.sub.st.mayAllocateNow("main"))
}

// Refused for what it asks (more GPUs than any node has): that is the
// answer, with the reason; no batch job follows to be refused again.
func TestCoreTakesAPermanentAllocationRefusalAsTheRejection(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true
	f.slurm.allocate = func(slurmrest.JobSubmit) (uint32, error) {
		return 0, &slurmrest.APIError{Op: "allocate job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
			Errors: []slurmrest.SlurmError{{Errno: slurmrest.ErrnoNodeConfigUnavailable, Error: "Requested node configuration is not available"}}}
	}
	require.NoError(t, f.submitOnce(t))
	assert.Empty(t, f.slurm.submitted)
	assert.Contains(t, f.core.Place(f.pod).Message, "Slurm rejected the placeholder job")
	assert.True(t, f.core.sub.st.mayAllocateNow("main"), "a pod's own rejection says nothing of the partition")
}

func TestNotNow(t *testing.T) {
	errno := func(n ...int) error {
		ae := &slurmrest.APIError{StatusCode: 500, Kind: slurmrest.ErrSlurm}
		for _, e := range n {
			ae.Errors = append(ae.Errors, slurmrest.SlurmError{Errno: e})
		}
		return ae
	}
	assert.True(t, notNow(errno(slurmrest.ErrnoNodesBusy)))
	assert.True(t, notNow(errno(slurmrest.ErrnoNotTopPriority)))
	assert.True(t, notNow(errno(slurmrest.ErrnoAccountingPolicy)))
	assert.False(t, notNow(errno(slurmrest.ErrnoNodeConfigUnavailable)))
	assert.False(t, notNow(errno(slurmrest.ErrnoNodesBusy, slurmrest.ErrnoInvalidQOS)))
	assert.False(t, notNow(errno()))
	assert.False(t, notNow(errors.New("boom")))
}

// A pod waits outside the scheduling queue only while its first ask to
// Slurm is in flight; then it is let in (and woken) whatever Slurm said.
func TestCoreGatesAPodWhileItsFirstAskIsInFlight(t *testing.T) {
	f := newCoreFixture(t)
	msg, gated := f.core.Gate(f.pod)
	assert.True(t, gated, "the submission was just queued")
	assert.Contains(t, msg, "submitting a placeholder job")
	key, _ := f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), key)) // queued as a batch job (no immediate allocation)
	f.core.submitQ.Done(key)
	_, gated = f.core.Gate(f.pod)
	assert.False(t, gated, "Slurm answered: a cycle says the pod waits in the queue")
	assert.Contains(t, f.woken, f.pod.Name, "woken to take that cycle")

	g := newCoreFixture(t)
	g.slurm.reject = &slurmrest.APIError{Op: "submit job", Kind: slurmrest.ErrUnreachable, Err: context.DeadlineExceeded}
	g.core.Gate(g.pod)
	key, _ = g.core.submitQ.Get()
	require.ErrorIs(t, g.core.sub.submit(context.Background(), key), errRetry)
	g.core.submitQ.Done(key)
	msg, gated = g.core.Gate(g.pod)
	assert.False(t, gated, "after a failed ask the pod's status must say why")
	assert.Contains(t, msg, "cannot submit the placeholder job to Slurm (retrying)")
}

// A pod deleted while its allocation is in flight, then seen once more by
// a scheduling cycle that still held it (the framework's queue and
// onepool's informer handler run apart): the late cycle must not make it
// a member again, or the granted job would be kept for a pod that is gone
// (found in chart mode: job RUNNING minutes after its pod was deleted).
func TestCoreCancelsAGrantedJobOfAPodDeletedWhileAsked(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ImmediateAllocation = true
	ctx := context.Background()
	granted := f.job(55, slurmrest.JobRunning, "gpu-1")
	f.slurm.jobs = map[uint32]*slurmrest.Job{55: &granted}
	f.slurm.allocate = func(slurmrest.JobSubmit) (uint32, error) {
		// Slurm grants it while the pod is deleted and reported gone.
		require.NoError(t, f.kube.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
		f.core.podDeleted(f.pod)
		return 55, nil
	}
	require.NoError(t, f.submitOnce(t))

	// The late cycle: PreEnqueue and PreFilter with the old object.
	msg, gated := f.core.Gate(f.pod)
	assert.False(t, gated)
	assert.Contains(t, msg, "deleted")
	assert.Empty(t, f.core.Place(f.pod).Node, "a deleted pod was placed")
	// An update the informer delivered late changes nothing either.
	f.core.podChanged(f.pod, f.pod)

	_, err := f.core.life.reconcile(ctx, ownerOf(f.pod).key())
	require.NoError(t, err)
	assert.Equal(t, []uint32{55}, f.slurm.cancelled, "the granted job of a deleted pod is cancelled")
}
