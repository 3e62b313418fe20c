package slurmrest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slurmdbd answers (db_*.json) were recorded from slurmrestd 24.11.5
// (v0.0.42) and 26.05.5 (v0.0.44) with openapi/slurmdbd, each beside its
// own slurmdbd and MariaDB, while `onepool-controller-manager
// ensure-accounting` set up the slurm chart's default QOS and associations;
// see internal/rest/testdata/<version>/README.md.

// refusedStatus is the HTTP status each version answers a refused QOS
// change with.
var refusedStatus = map[string]string{"v0.0.42": "500", "v0.0.44": "422"}

func TestReplayAccountingReads(t *testing.T) {
	ctx := context.Background()
	for _, v := range APIVersions {
		t.Run(v, func(t *testing.T) {
			c, _ := newReplayVersion(t, v, map[string]string{
				"GET /slurmdb/clusters/":                     "db_clusters.200.json",
				"GET /slurmdb/qos/":                          "db_qos.200.json",
				"GET /slurmdb/associations/?cluster=onepool": "db_associations.200.json",
			})
			clusters, err := c.ListClusters(ctx)
			require.NoError(t, err)
			assert.Equal(t, []string{"onepool"}, clusters)

			qos, err := c.ListQOS(ctx)
			require.NoError(t, err)
			assert.Equal(t, []QOS{
				{Name: "normal", Description: "Normal QOS default", Priority: 10, GraceTimeSeconds: 30, Preempt: []string{}, PreemptMode: PreemptModeCluster},
				{Name: "low", Priority: 0, GraceTimeSeconds: 30, Preempt: []string{}, PreemptMode: PreemptModeCluster},
				{Name: "high", Priority: 1000, Preempt: []string{"normal", "low"}, PreemptMode: PreemptModeCancel},
			}, qos)

			assocs, err := c.ListAssociations(ctx, "onepool")
			require.NoError(t, err)
			var users, accounts []string
			for _, a := range assocs {
				assert.Equal(t, "onepool", a.Cluster)
				if a.User == "" {
					accounts = append(accounts, a.Account)
					continue
				}
				users = append(users, a.User+"/"+a.Account)
				if a.Account != "root" {
					assert.ElementsMatch(t, []string{"high", "low", "normal"}, a.QOS, a.User)
					assert.Equal(t, "normal", a.DefaultQOS, a.User)
				}
			}
			assert.ElementsMatch(t, []string{"root", "users", "onepool"}, accounts)
			assert.ElementsMatch(t, []string{"root/root", "alice/users", "slurm/onepool"}, users)

			// Before its slurmctld registers, slurmdbd has no cluster (and
			// says so in a warning, not an error).
			c, _ = newReplayVersion(t, v, map[string]string{"GET /slurmdb/clusters/": "db_clusters_none.200.json"})
			clusters, err = c.ListClusters(ctx)
			require.NoError(t, err)
			assert.Empty(t, clusters)

			// A slurmrestd without openapi/slurmdbd has no such path.
			c, _ = newReplayVersion(t, v, map[string]string{"GET /slurmdb/clusters/": "db_no_plugin.404.json"})
			_, err = c.ListClusters(ctx)
			assert.ErrorIs(t, err, ErrNotFound)
			noToken(t, err)
		})
	}
}

// lastBody is the body of the last request to key.
func lastBody(t *testing.T, rp *replay, key string) map[string]any {
	t.Helper()
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for i := len(rp.seen) - 1; i >= 0; i-- {
		r := rp.seen[i]
		if r.Method+" "+rp.path(r.URL.Path) == key {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(rp.bodies[i]), &m), rp.bodies[i])
			return m
		}
	}
	t.Fatalf("no request %s", key)
	return nil
}

// recordedObject is the first object under list in a recorded answer.
func recordedObject(t *testing.T, version, file, list string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(recorded(version), file))
	require.NoError(t, err)
	var answer map[string][]map[string]any
	var all map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &all))
	require.NoError(t, json.Unmarshal([]byte(`{"x":`+string(all[list])+`}`), &answer))
	require.NotEmpty(t, answer["x"])
	return answer["x"][0]
}

func TestReplaySetQOS(t *testing.T) {
	ctx := context.Background()
	for _, v := range APIVersions {
		t.Run(v, func(t *testing.T) {
			c, rp := newReplayVersion(t, v, map[string]string{
				"GET /slurmdb/qos/low":  "db_qos_low_none.200.json",
				"GET /slurmdb/qos/high": "db_qos_high_drifted.200.json",
				"POST /slurmdb/qos/":    "db_qos_post.200.json",
			})
			// A new QOS: its name and the fields given, and always a mode.
			created, err := c.SetQOS(ctx, "low", QOSUpdate{GraceTimeSeconds: ptrTo[uint32](30),
				MaxTRESPerUser: []TRES{{Type: "gres", Name: "gpu", Count: 8}, {Type: "cpu", Count: -1}}})
			require.NoError(t, err)
			assert.True(t, created)
			assert.Equal(t, map[string]any{"qos": []any{map[string]any{
				"name": "low", "limits": map[string]any{"grace_time": 30.0,
					"max": map[string]any{"tres": map[string]any{"per": map[string]any{"user": []any{map[string]any{"type": "gres", "name": "gpu", "count": 8.0}}}}}},
				"preempt": map[string]any{"mode": []any{"DISABLED"}},
			}}}, lastBody(t, rp, "POST /slurmdb/qos/"))

			// An existing QOS an admin changed (priority 5, DenyOnLimit):
			// sent back whole, only onepool's fields changed, so its flags and
			// preempt mode stay (slurmrestd clears what a POST leaves out).
			created, err = c.SetQOS(ctx, "high", QOSUpdate{Priority: ptrTo[uint32](1000), MaxTRESPerUser: []TRES{{Type: "cpu", Count: 8}}})
			require.NoError(t, err)
			assert.False(t, created)
			sent := lastBody(t, rp, "POST /slurmdb/qos/")["qos"].([]any)[0].(map[string]any)
			want := recordedObject(t, v, "db_qos_high_drifted.200.json", "qos")
			assert.Equal(t, []any{"DENY_LIMIT"}, want["flags"], "the recording")
			assert.Equal(t, map[string]any{"set": true, "number": 1000.0}, sent["priority"])
			assert.Equal(t, []any{map[string]any{"type": "cpu", "count": 8.0}}, sent["limits"].(map[string]any)["max"].(map[string]any)["tres"].(map[string]any)["per"].(map[string]any)["user"])
			sent["priority"], want["priority"] = nil, nil
			sent["limits"].(map[string]any)["max"].(map[string]any)["tres"].(map[string]any)["per"].(map[string]any)["user"] = []any{}
			assert.Equal(t, want, sent, "every other field as listed")

			// A preempt list naming a QOS slurmdbd does not know.
			c, _ = newReplayVersion(t, v, map[string]string{
				"GET /slurmdb/qos/high": "db_qos_high_drifted.200.json",
				"POST /slurmdb/qos/":    "db_qos_post_unknown_preempt." + refusedStatus[v] + ".json",
			})
			_, err = c.SetQOS(ctx, "high", QOSUpdate{Preempt: &[]string{"nosuch"}})
			var ae *APIError
			require.ErrorAs(t, err, &ae)
			assert.ErrorIs(t, err, ErrSlurm)
			assert.True(t, ae.HasErrno(ErrnoInvalidQOS), "%v", err)
			assert.Contains(t, err.Error(), "Unable to resolve QOS: nosuch")
		})
	}
}

func TestReplayAccountsAndAssociations(t *testing.T) {
	ctx := context.Background()
	for _, v := range APIVersions {
		t.Run(v, func(t *testing.T) {
			c, rp := newReplayVersion(t, v, map[string]string{
				"POST /slurmdb/accounts_association/":                                  "db_accounts_association.200.json",
				"POST /slurmdb/users_association/":                                     "db_users_association.200.json",
				"GET /slurmdb/associations/?account=users&cluster=onepool&user=alice":  "db_association_alice.200.json",
				"GET /slurmdb/associations/?account=users&cluster=onepool&user=nobody": "db_association_none.200.json",
				"POST /slurmdb/associations/":                                          "db_associations_post.200.json",
			})
			require.NoError(t, c.AddAccount(ctx, "onepool", Account{Name: "users", Description: "login users", Organization: "onepool"}))
			assert.Equal(t, map[string]any{
				"association_condition": map[string]any{"accounts": []any{"users"}, "clusters": []any{"onepool"}},
				"account":               map[string]any{"description": "login users", "organization": "onepool"},
			}, lastBody(t, rp, "POST /slurmdb/accounts_association/"))

			require.NoError(t, c.AddUserAssociation(ctx, Association{Cluster: "onepool", Account: "users", User: "alice",
				QOS: []string{"high", "low", "normal"}, DefaultQOS: "normal"}))
			assert.Equal(t, map[string]any{
				"association_condition": map[string]any{"accounts": []any{"users"}, "clusters": []any{"onepool"}, "users": []any{"alice"},
					"association": map[string]any{"qoslevel": []any{"high", "low", "normal"}, "defaultqos": "normal"}},
				// No default account: a new user's is this one, an existing user's stays.
				"user": map[string]any{},
			}, lastBody(t, rp, "POST /slurmdb/users_association/"))

			// alice's association has GrpTRES cpu=50, which a POST without it
			// would remove: it is sent back whole.
			key := Association{Cluster: "onepool", Account: "users", User: "alice"}
			require.NoError(t, c.UpdateAssociation(ctx, key, AssociationUpdate{QOS: &[]string{"low", "normal"}, DefaultQOS: ptrTo("low")}))
			sent := lastBody(t, rp, "POST /slurmdb/associations/")["associations"].([]any)[0].(map[string]any)
			want := recordedObject(t, v, "db_association_alice.200.json", "associations")
			assert.Equal(t, []any{"low", "normal"}, sent["qos"])
			assert.Equal(t, map[string]any{"qos": "low"}, sent["default"])
			assert.Equal(t, []any{map[string]any{"type": "cpu", "name": "", "id": 1.0, "count": 50.0}},
				sent["max"].(map[string]any)["tres"].(map[string]any)["total"], "GrpTRES sent back")
			sent["qos"], sent["default"], want["qos"], want["default"] = nil, nil, nil, nil
			assert.Equal(t, want, sent, "every other field as listed")

			err := c.UpdateAssociation(ctx, Association{Cluster: "onepool", Account: "users", User: "nobody"}, AssociationUpdate{QOS: &[]string{"normal"}})
			assert.ErrorIs(t, err, ErrNotFound)

			// What exists already: HTTP 304, no error.
			c, _ = newReplayVersion(t, v, map[string]string{
				"POST /slurmdb/accounts_association/": "db_accounts_association_exists.304.json",
				"POST /slurmdb/users_association/":    "db_users_association_exists.304.json",
			})
			assert.NoError(t, c.AddAccount(ctx, "onepool", Account{Name: "users"}))
			assert.NoError(t, c.AddUserAssociation(ctx, Association{Cluster: "onepool", Account: "users", User: "alice"}))
		})
	}
}

func TestParseTRES(t *testing.T) {
	got, err := ParseTRES(" gres/gpu=8, cpu=64,mem=-1 ")
	require.NoError(t, err)
	assert.Equal(t, []TRES{{Type: "gres", Name: "gpu", Count: 8}, {Type: "cpu", Count: 64}, {Type: "mem", Count: -1}}, got)
	assert.Equal(t, "cpu=64,gres/gpu=8,mem=-1", FormatTRES(got))
	for _, bad := range []string{"gpu", "cpu=x", "cpu=-2", "=3", "cpu=1,cpu=2", "gres/=1", "a b=1"} {
		_, err := ParseTRES(bad)
		assert.Error(t, err, bad)
	}
	none, err := ParseTRES("")
	assert.NoError(t, err)
	assert.Empty(t, none)
}

func ptrTo[T any](v T) *T { return &v }
