package scheduler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/onepool/onepool/slurmrest"
)

// fakeLock is a lease lock whose writes succeed unless failing is set.
type fakeLock struct {
	id      string
	failing bool
	rec     resourcelock.LeaderElectionRecord
}

func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &f.rec, nil, nil
}
func (f *fakeLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return f.write(r)
}
func (f *fakeLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return f.write(r)
}
func (f *fakeLock) write(r resourcelock.LeaderElectionRecord) error {
	if f.failing {
		return errors.New("apiserver unreachable")
	}
	f.rec = r
	return nil
}
func (f *fakeLock) RecordEvent(string) {}
func (f *fakeLock) Identity() string   { return f.id }
func (f *fakeLock) Describe() string   { return "onepool-system/onepool-scheduler" }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLeaderGateFollowsTheLeaseWrites(t *testing.T) {
	now := time.Unix(1000, 0)
	g := NewLeaderGate()
	g.now = func() time.Time { return now }
	raw := &fakeLock{id: "me"}
	lock := g.Wrap(raw, 10*time.Second)
	ctx := context.Background()

	assert.False(t, g.IsLeader(), "a new gate leads")
	assert.False(t, closed(g.Leading()))

	// Another replica's record (e.g. a standby observing, or the old
	// leader releasing with an empty holder) is not ours.
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}))
	assert.False(t, g.IsLeader(), "a write naming no holder made this replica leader")

	raw.failing = true
	require.Error(t, lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.False(t, g.IsLeader(), "a failed acquisition made this replica leader")

	raw.failing = false
	require.NoError(t, lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.True(t, g.IsLeader())
	assert.True(t, closed(g.Leading()))

	now = now.Add(9 * time.Second)
	assert.True(t, g.IsLeader(), "within the renew deadline")
	raw.failing = true
	require.Error(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	now = now.Add(2 * time.Second)
	assert.False(t, g.IsLeader(), "a lease not renewed for the renew deadline still leads")
	assert.True(t, closed(g.Leading()), "Leading reopened")

	raw.failing = false
	require.NoError(t, lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}))
	assert.True(t, g.IsLeader(), "a renewal did not count")
}

func TestLeaderGateLeadsForGoodWithoutElection(t *testing.T) {
	g := NewLeaderGate()
	g.Lead()
	g.now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	assert.True(t, g.IsLeader())
	assert.True(t, closed(g.Leading()))
}

// A standby replica has the same pods and may have seen the same jobs, but
// it cancels nothing, evicts nothing, submits nothing and tells no
// placeholder that its pod is gone.
func TestCoreOnAStandbyReplicaActsOnNothing(t *testing.T) {
	f := newCoreFixture(t)
	f.standby()
	key := ownerOf(f.pod).key()

	f.core.book.observe(f.job(9, slurmrest.JobRunning, "gpu-1"))
	f.core.book.observe(f.job(7, slurmrest.JobPending, ""))
	f.core.book.observe(f.job(9, slurmrest.JobCancelled, "gpu-1"))
	after, err := f.core.life.reconcile(context.Background(), key)
	require.NoError(t, err)
	assert.Positive(t, after, "a standby drops the placement instead of looking again")
	assert.Empty(t, f.slurm.cancelled, "a standby cancelled a job")
	for _, a := range f.kube.Actions() {
		assert.Contains(t, []string{"get", "list", "watch"}, a.GetVerb(), "a standby acted on Kubernetes: %v", a)
	}

	other := podWith(nil, 1, "", "")
	other.Name, other.UID, other.Spec.SchedulerName = "q", "u2", "onepool"
	f.core.podChanged(nil, other)
	f.core.Place(other)
	assert.Error(t, f.core.sub.submit(context.Background(), ownerOf(other).key()))
	assert.Empty(t, f.slurm.submitted, "a standby submitted a job")

	srv := httptest.NewServer(f.core.rel.handler())
	defer srv.Close()
	f.core.podDeleted(f.pod)
	resp, err := http.Get(srv.URL + "/v1/placeholders/7")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a standby answered a placeholder")
}
