package accounting

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

func u32(n uint32) *uint32 { return &n }
func str(s string) *string { return &s }
func strs(s ...string) *[]string {
	if s == nil {
		s = []string{}
	}
	return &s
}

// chartDefaults is what the slurm chart's default values render: the lab's
// QOS table and its two accounts.
func chartDefaults() Config {
	all := []string{"high", "low", "normal"}
	return Config{
		Cluster: "onepool",
		QOS: []QOS{
			{Name: "normal", Priority: u32(10), Preempt: strs(), PreemptMode: str("cluster"), GraceTime: u32(30)},
			{Name: "low", Priority: u32(0), Preempt: strs(), PreemptMode: str("cluster"), GraceTime: u32(30)},
			{Name: "high", Priority: u32(1000), Preempt: strs("low", "normal"), PreemptMode: str("cancel"), GraceTime: u32(0)},
		},
		Accounts: []Account{
			{Name: "users", Description: "login users", Organization: "onepool", Users: []User{{Name: "alice", QOS: all, DefaultQOS: "normal"}}},
			{Name: "onepool", Users: []User{{Name: "slurm", QOS: all, DefaultQOS: "normal"}}},
		},
	}
}

// freshSlurm is what a new slurmdbd holds once its cluster registered.
func freshSlurm() State {
	return State{
		QOS: []slurmrest.QOS{{Name: "normal", Description: "Normal QOS default", Preempt: []string{}, PreemptMode: "cluster"}},
		Associations: []slurmrest.Association{
			{Cluster: "onepool", Account: "root", QOS: []string{"normal"}},
			{Cluster: "onepool", Account: "root", User: "root", QOS: []string{"normal"}},
		},
	}
}

// inSync is what slurmdbd holds after chartDefaults were ensured.
func inSync() State {
	s := freshSlurm()
	s.QOS = []slurmrest.QOS{
		{Name: "normal", Description: "Normal QOS default", Priority: 10, GraceTimeSeconds: 30, Preempt: []string{}, PreemptMode: "cluster"},
		{Name: "low", Priority: 0, GraceTimeSeconds: 30, Preempt: []string{}, PreemptMode: "cluster"},
		{Name: "high", Priority: 1000, Preempt: []string{"normal", "low"}, PreemptMode: "cancel"},
	}
	s.Associations = append(s.Associations,
		slurmrest.Association{Cluster: "onepool", Account: "users", QOS: []string{"normal"}},
		slurmrest.Association{Cluster: "onepool", Account: "users", User: "alice", QOS: []string{"low", "normal", "high"}, DefaultQOS: "normal"},
		slurmrest.Association{Cluster: "onepool", Account: "onepool", QOS: []string{"normal"}},
		slurmrest.Association{Cluster: "onepool", Account: "onepool", User: "slurm", QOS: []string{"normal", "high", "low"}, DefaultQOS: "normal"},
	)
	return s
}

// freshChanges: chartDefaults on freshSlurm, as the report prints them.
var freshChanges = []string{
	"qos low: make with graceTime 30s, preemptMode cluster",
	"qos high: make with priority 1000, preemptMode cancel",
	"qos normal: change priority 0 → 10; graceTime 0s → 30s",
	"qos high: change preempt low,normal",
	"account users: make",
	"account onepool: make",
	"association alice/users: make with qos high,low,normal, default qos normal",
	"association slurm/onepool: make with qos high,low,normal, default qos normal",
}

func lines(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		want func() Config
		have func() State
		// the changes, in order, as the report prints them
		changes []string
	}{{
		name: "a fresh slurmdbd: QOS made first, high's preempt list once low exists, then accounts, then associations",
		want: chartDefaults, have: freshSlurm,
		changes: freshChanges,
	}, {
		name: "in sync: nothing (lists compared as sets, Slurm's own order)",
		want: chartDefaults, have: inSync,
	}, {
		name: "an admin's changes to what the values name are undone; what they do not name stays",
		want: chartDefaults,
		have: func() State {
			s := inSync()
			s.QOS[2].Priority = 5
			s.QOS[2].Preempt = []string{"low", "inference"}
			s.QOS[0].PreemptMode = "requeue"
			s.QOS = append(s.QOS, slurmrest.QOS{Name: "inference", Priority: 50, PreemptMode: "cluster"})
			s.Associations[3].QOS = []string{"normal"}
			s.Associations[3].DefaultQOS = "normal"
			s.Associations = append(s.Associations, slurmrest.Association{Cluster: "onepool", Account: "users", User: "bob", QOS: []string{"inference"}},
				// another cluster's and a partition's associations are not this cluster's
				slurmrest.Association{Cluster: "other", Account: "users", User: "alice", QOS: []string{"normal"}},
				slurmrest.Association{Cluster: "onepool", Account: "users", User: "alice", Partition: "debug", QOS: []string{"normal"}})
			return s
		},
		changes: []string{
			"qos normal: change preemptMode requeue → cluster",
			"qos high: change priority 5 → 1000; preempt inference,low → low,normal",
			"association alice/users: change qos normal → high,low,normal",
		},
	}, {
		name: "a field the values leave out is Slurm's",
		want: func() Config {
			return Config{Cluster: "onepool", QOS: []QOS{{Name: "normal"}, {Name: "high", Priority: u32(1000)}},
				Accounts: []Account{{Name: "users", Users: []User{{Name: "alice", DefaultQOS: "low"}}}}}
		},
		have: inSync,
		changes: []string{
			"association alice/users: change default qos normal → low",
		},
	}, {
		name: "an existing QOS's preempt list may name a QOS made in the same run",
		want: func() Config {
			c := chartDefaults()
			c.QOS = append(c.QOS, QOS{Name: "scavenger", Priority: u32(0)})
			c.QOS[2].Preempt = strs("low", "normal", "scavenger")
			return c
		},
		have: inSync,
		changes: []string{
			"qos scavenger: make",
			"qos high: change preempt low,normal → low,normal,scavenger",
		},
	}, {
		name: "per-user TRES limits: set, changed, removed with -1; a TRES left out is kept",
		want: func() Config {
			c := chartDefaults()
			c.QOS[0].MaxTRESPerUser = str("gres/gpu=8,cpu=-1,mem=-1")
			c.QOS[1].MaxTRESPerUser = str("gres/gpu=2")
			return c
		},
		have: func() State {
			s := inSync()
			s.QOS[0].MaxTRESPerUser = []slurmrest.TRES{{Type: "gres", Name: "gpu", Count: 4}, {Type: "cpu", Count: 64}, {Type: "node", Count: 2}}
			s.QOS[1].MaxTRESPerUser = []slurmrest.TRES{{Type: "gres", Name: "gpu", Count: 2}}
			return s
		},
		changes: []string{
			"qos normal: change maxTRESPerUser gres/gpu 4 → 8; maxTRESPerUser cpu 64 → none",
		},
	}, {
		name: "an account slurmdbd has on another cluster only is made here",
		want: func() Config {
			return Config{Cluster: "onepool", Accounts: []Account{{Name: "team-a", Description: "Team A"}}}
		},
		have: func() State {
			s := inSync()
			s.Associations = append(s.Associations, slurmrest.Association{Cluster: "other", Account: "team-a"})
			return s
		},
		changes: []string{"account team-a: make"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := tc.want().Normalize()
			require.NoError(t, err)
			got, err := Plan(want, tc.have())
			require.NoError(t, err)
			assert.Equal(t, tc.changes, lines(got))
		})
	}
}

// The payloads are what the client is asked to do.
func TestPlanPayloads(t *testing.T) {
	got, err := Plan(chartDefaults(), freshSlurm())
	require.NoError(t, err)
	require.Len(t, got, 8)
	assert.Equal(t, "low", got[0].QOSName)
	assert.Equal(t, slurmrest.QOSUpdate{GraceTimeSeconds: u32(30), PreemptMode: str("cluster")}, *got[0].QOS, "a new QOS without what Slurm's default already is")
	assert.Equal(t, slurmrest.QOSUpdate{Priority: u32(1000), PreemptMode: str("cancel")}, *got[1].QOS, "made without its preempt list")
	assert.Equal(t, slurmrest.QOSUpdate{Preempt: strs("low", "normal")}, *got[3].QOS)
	assert.Equal(t, slurmrest.Account{Name: "users", Description: "login users", Organization: "onepool"}, *got[4].Account)
	assert.Equal(t, slurmrest.Association{Cluster: "onepool", Account: "users", User: "alice", QOS: []string{"high", "low", "normal"}, DefaultQOS: "normal"},
		*got[6].AddAssociation)

	s := inSync()
	s.Associations[3].QOS = []string{"normal"}
	got, err = Plan(chartDefaults(), s)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, slurmrest.Association{Cluster: "onepool", Account: "users", User: "alice"}, got[0].AssociationKey)
	assert.Equal(t, slurmrest.AssociationUpdate{QOS: strs("high", "low", "normal")}, *got[0].UpdateAssociation)
}

func TestPlanRefusesQOSNobodyHas(t *testing.T) {
	c := chartDefaults()
	c.QOS[2].Preempt = strs("low", "scavenger")
	c.Accounts[0].Users[0].QOS = []string{"normal", "inference"}
	_, err := Plan(c, inSync())
	require.Error(t, err)
	assert.Equal(t, "no such QOS in the values or in Slurm: association alice/users names QOS inference; qos high's preempt names QOS scavenger", err.Error())

	// A QOS an admin made (not in the values) may be named.
	s := inSync()
	s.QOS = append(s.QOS, slurmrest.QOS{Name: "inference"}, slurmrest.QOS{Name: "scavenger"})
	_, err = Plan(c, s)
	assert.NoError(t, err)
}

func TestChangeString(t *testing.T) {
	assert.Equal(t, "account users: make", Change{Object: "account users", Create: true}.String())
	assert.Equal(t, "qos a: change priority 1 → 2; graceTime 0s → 30s",
		Change{Object: "qos a", Details: []string{"priority 1 → 2", "graceTime 0s → 30s"}}.String())
	assert.True(t, strings.HasPrefix(Change{Object: "qos a", Create: true, Details: []string{"priority 1"}}.String(), "qos a: make with priority 1"))
}
