package accounting

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// fakeSlurm is slurmdbd behind slurmrestd as recorded on 24.11 and 26.05,
// quirks included: a preempt list cannot be emptied, and a user's
// association naming an account or QOS slurmdbd lacks is not made, and
// nothing is said.
type fakeSlurm struct {
	State
	clusters [][]string // answers to ListClusters in turn; the last repeats
	listErr  error      // ListClusters' error
	failSet  error      // SetQOS's error
	dropAdds bool       // AddUserAssociation makes nothing
	writes   int
}

func (f *fakeSlurm) ListClusters(context.Context) ([]string, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	c := f.clusters[0]
	if len(f.clusters) > 1 {
		f.clusters = f.clusters[1:]
	}
	return c, nil
}

func (f *fakeSlurm) ListQOS(context.Context) ([]slurmrest.QOS, error) {
	return slices.Clone(f.QOS), nil
}

func (f *fakeSlurm) qos(name string) int {
	return slices.IndexFunc(f.QOS, func(q slurmrest.QOS) bool { return q.Name == name })
}

func (f *fakeSlurm) SetQOS(_ context.Context, name string, u slurmrest.QOSUpdate) (bool, error) {
	f.writes++
	if f.failSet != nil {
		return false, f.failSet
	}
	if u.Preempt != nil {
		for _, p := range *u.Preempt {
			if f.qos(p) < 0 {
				return false, errors.New("Unable to resolve QOS: " + p)
			}
		}
	}
	i := f.qos(name)
	created := i < 0
	if created {
		f.QOS = append(f.QOS, slurmrest.QOS{Name: name, PreemptMode: "cluster"})
		i = len(f.QOS) - 1
	}
	q := &f.QOS[i]
	if u.Priority != nil {
		q.Priority = *u.Priority
	}
	if u.GraceTimeSeconds != nil {
		q.GraceTimeSeconds = *u.GraceTimeSeconds
	}
	if u.PreemptMode != nil {
		q.PreemptMode = *u.PreemptMode
	}
	if u.Preempt != nil && len(*u.Preempt) > 0 {
		q.Preempt = slices.Clone(*u.Preempt)
	}
	for _, t := range u.MaxTRESPerUser {
		q.MaxTRESPerUser = slices.DeleteFunc(q.MaxTRESPerUser, func(h slurmrest.TRES) bool { return h.Key() == t.Key() })
		if t.Count >= 0 {
			q.MaxTRESPerUser = append(q.MaxTRESPerUser, t)
		}
	}
	return created, nil
}

func (f *fakeSlurm) ListAssociations(_ context.Context, cluster string) ([]slurmrest.Association, error) {
	var out []slurmrest.Association
	for _, a := range f.Associations {
		if a.Cluster == cluster {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeSlurm) assoc(cluster, account, user string) int {
	return slices.IndexFunc(f.Associations, func(a slurmrest.Association) bool {
		return a.Cluster == cluster && a.Account == account && a.User == user
	})
}

func (f *fakeSlurm) AddAccount(_ context.Context, cluster string, a slurmrest.Account) error {
	f.writes++
	if f.assoc(cluster, a.Name, "") < 0 {
		f.Associations = append(f.Associations, slurmrest.Association{Cluster: cluster, Account: a.Name, QOS: []string{"normal"}})
	}
	return nil
}

func (f *fakeSlurm) AddUserAssociation(_ context.Context, a slurmrest.Association) error {
	f.writes++
	if f.dropAdds || f.assoc(a.Cluster, a.Account, "") < 0 || f.assoc(a.Cluster, a.Account, a.User) >= 0 {
		return nil
	}
	for _, q := range append(slices.Clone(a.QOS), a.DefaultQOS) {
		if q != "" && f.qos(q) < 0 {
			return nil
		}
	}
	if a.QOS == nil {
		a.QOS = []string{"normal"}
	}
	f.Associations = append(f.Associations, a)
	return nil
}

func (f *fakeSlurm) UpdateAssociation(_ context.Context, key slurmrest.Association, u slurmrest.AssociationUpdate) error {
	f.writes++
	i := f.assoc(key.Cluster, key.Account, key.User)
	if i < 0 {
		return slurmrest.ErrNotFound
	}
	if u.QOS != nil {
		f.Associations[i].QOS = slices.Clone(*u.QOS)
	}
	if u.DefaultQOS != nil {
		f.Associations[i].DefaultQOS = *u.DefaultQOS
	}
	return nil
}

func TestEnsureWaitsForTheClusterThenConvergesOnce(t *testing.T) {
	f := &fakeSlurm{State: freshSlurm(), clusters: [][]string{nil, nil, {"other"}, {"other", "onepool"}}}
	var log bytes.Buffer
	want := chartDefaults()
	done, err := Ensure(context.Background(), f, want, Options{Poll: time.Millisecond, Log: &log})
	require.NoError(t, err)
	assert.Len(t, done, 8)
	assert.Equal(t, append([]string{
		"waiting: slurmdbd has no cluster onepool yet (it has (none))",
		"waiting: slurmdbd has no cluster onepool yet (it has other)",
	}, freshChanges...), strings.Split(strings.TrimSpace(log.String()), "\n"), "one line per wait state, then one per change")

	writes := f.writes
	done, err = Ensure(context.Background(), f, want, Options{Poll: time.Millisecond})
	require.NoError(t, err)
	assert.Empty(t, done, "run again: nothing to do")
	assert.Equal(t, writes, f.writes, "and nothing written")
}

func TestEnsureWaitIsBounded(t *testing.T) {
	f := &fakeSlurm{State: freshSlurm(), clusters: [][]string{nil}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Ensure(ctx, f, chartDefaults(), Options{Poll: time.Millisecond})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "slurmdbd never listed cluster onepool: slurmdbd has no cluster onepool yet")
	assert.Zero(t, f.writes)

	// Unreachable is waited out like the rest; no slurmdbd plugin is not.
	f = &fakeSlurm{listErr: &slurmrest.APIError{Op: "list clusters", Kind: slurmrest.ErrUnreachable}}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = Ensure(ctx, f, chartDefaults(), Options{Poll: time.Millisecond})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "slurmrest: list clusters")
	f = &fakeSlurm{listErr: &slurmrest.APIError{Op: "list clusters", StatusCode: 404, Kind: slurmrest.ErrNotFound}}
	start := time.Now()
	_, err = Ensure(context.Background(), f, chartDefaults(), Options{Poll: time.Hour})
	assert.ErrorContains(t, err, "slurmrestd has no slurmdbd endpoints (start it with -s openapi/slurmctld,openapi/slurmdbd)")
	assert.Less(t, time.Since(start), time.Minute)
}

// What slurmdbd takes without doing is found by reading it back.
func TestEnsureReadsBackAndSaysWhatDidNotTake(t *testing.T) {
	f := &fakeSlurm{State: inSync(), clusters: [][]string{{"onepool"}}}
	want := chartDefaults()
	want.QOS[2].Preempt = strs()
	_, err := Ensure(context.Background(), f, want, Options{})
	require.Error(t, err)
	assert.Equal(t, "slurmdbd took the changes but still differs from the values:\n"+
		"  qos high: change preempt low,normal → (none) (slurmrestd cannot empty a preempt list on Slurm 24.11 to 26.05: run `sacctmgr modify qos high set preempt=''` once)",
		err.Error())

	// A user's association slurmdbd answers 304 for and does not make
	// (as for an account or QOS it lacks).
	f = &fakeSlurm{State: inSync(), clusters: [][]string{{"onepool"}}, dropAdds: true}
	want = chartDefaults()
	want.Accounts = append(want.Accounts, Account{Name: "team-a", Users: []User{{Name: "bob", QOS: []string{"normal"}}}})
	done, err := Ensure(context.Background(), f, want, Options{})
	require.Error(t, err)
	assert.Len(t, done, 2, "the account and the association were asked for")
	assert.Equal(t, "slurmdbd took the changes but still differs from the values:\n"+
		"  association bob/team-a: make with qos normal (slurmdbd makes no association, and says nothing, for an account or QOS it does not know)",
		err.Error())
}

func TestEnsureStopsAtTheFirstRefusal(t *testing.T) {
	f := &fakeSlurm{State: freshSlurm(), clusters: [][]string{{"onepool"}}, failSet: errors.New("slurmrest: set QOS low: HTTP 500")}
	done, err := Ensure(context.Background(), f, chartDefaults(), Options{})
	assert.EqualError(t, err, "qos low: slurmrest: set QOS low: HTTP 500")
	assert.Empty(t, done)
	assert.Equal(t, 1, f.writes, "nothing after the refusal (the Job runs it again)")
}
