package accounting

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "accounting.json")
	// As the slurm chart renders it: the values' accounts first, then the
	// ones it makes for the login users and onepool (users again here).
	require.NoError(t, os.WriteFile(file, []byte(`{"cluster": "onepool",
	  "qos": [{"name": "normal", "priority": 10, "preempt": [], "preemptMode": "cluster", "graceTime": 30},
	          {"name": "high", "priority": 1000, "preempt": ["normal"], "preemptMode": "cancel", "graceTime": 0, "maxTRESPerUser": "gres/gpu=8"}],
	  "accounts": [{"name": "users", "description": "Login users", "users": [{"name": "bob", "qos": ["normal"]}]},
	               {"name": "team-a", "users": [{"name": "team-a", "qos": ["normal", "high"], "defaultQOS": "normal"}]},
	               {"name": "users", "description": "login users", "organization": "onepool", "users": [{"name": "alice", "qos": ["normal", "high"], "defaultQOS": "normal"}]}]}`), 0o644))
	c, err := Load(file)
	require.NoError(t, err)
	assert.Equal(t, "onepool", c.Cluster)
	assert.Equal(t, []string{"", "gres/gpu=8"}, []string{deref(c.QOS[0].MaxTRESPerUser), deref(c.QOS[1].MaxTRESPerUser)})
	assert.Equal(t, &[]string{}, c.QOS[0].Preempt, "an empty preempt list is one (not: left out)")
	require.Len(t, c.Accounts, 2, "users named twice is one account")
	assert.Equal(t, Account{Name: "users", Description: "Login users", Organization: "onepool",
		Users: []User{{Name: "bob", QOS: []string{"normal"}}, {Name: "alice", QOS: []string{"normal", "high"}, DefaultQOS: "normal"}}}, c.Accounts[0])

	require.NoError(t, os.WriteFile(file, []byte(`{"cluster": "onepool", "qos": [{"name": "normal", "prio": 10}]}`), 0o644))
	_, err = Load(file)
	assert.ErrorContains(t, err, `unknown field "prio"`)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestNormalizeRefuses(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, "cluster: empty"},
		{Config{Cluster: "c", QOS: []QOS{{Name: "a"}, {Name: "a"}}}, "qos a: named twice"},
		{Config{Cluster: "c", QOS: []QOS{{Name: "a,b"}}}, `qos "a,b": not a QOS name`},
		{Config{Cluster: "c", QOS: []QOS{{Name: "a", PreemptMode: str("suspend")}}}, `qos a: preemptMode "suspend": want one of cluster, cancel, requeue`},
		{Config{Cluster: "c", QOS: []QOS{{Name: "a", Preempt: strs("a")}}}, `qos a: preempt "a": not another QOS's name`},
		{Config{Cluster: "c", QOS: []QOS{{Name: "a", MaxTRESPerUser: str("gpu")}}}, `qos a: maxTRESPerUser: TRES "gpu"`},
		{Config{Cluster: "c", Accounts: []Account{{Name: ""}}}, `account "": not an account name`},
		{Config{Cluster: "c", Accounts: []Account{{Name: "a", Users: []User{{Name: "u"}}}, {Name: "a", Users: []User{{Name: "u"}}}}}, "account a: user u named twice"},
		{Config{Cluster: "c", Accounts: []Account{{Name: "a", Users: []User{{Name: "u", QOS: []string{"normal"}, DefaultQOS: "high"}}}}},
			"account a: user u: defaultQOS high is not in its qos (normal)"},
		{Config{Cluster: "c", Accounts: []Account{{Name: "a", Users: []User{{Name: "u u"}}}}}, `account a: user "u u": not a user name`},
	} {
		_, err := tc.c.Normalize()
		assert.ErrorContains(t, err, tc.want)
	}
}
