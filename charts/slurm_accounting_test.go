package charts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/onepool/onepool/accounting"
)

// slurmAccounting renders the slurm chart with the lab's values and more
// helm arguments (--set, -f), and returns the accounting Job's config as
// ensure-accounting loads it, the Job's name and the render.
func slurmAccounting(t *testing.T, h helm, more ...string) (accounting.Config, string, string) {
	t.Helper()
	args := append(labTemplateArgs(chartDir(t, "slurm"), nil), more...)
	args = append(args, "--show-only", "templates/accounting-setup.yaml")
	out, stderr, err := h.run(args...)
	require.NoError(t, err, "helm %v: %s", args, stderr)
	var job string
	var conf accounting.Config
	for _, doc := range strings.Split(out, "\n---") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
		switch o.Kind {
		case "Job":
			job = o.Metadata.Name
		case "ConfigMap":
			file := filepath.Join(t.TempDir(), "accounting.json")
			require.NoError(t, os.WriteFile(file, []byte(o.Data["accounting.json"]), 0o644))
			conf, err = accounting.Load(file)
			require.NoError(t, err, "ensure-accounting refuses the chart's config:\n%s", o.Data["accounting.json"])
		}
	}
	require.NotEmpty(t, job, "no accounting Job")
	return conf, job, out
}

func u32(n uint32) *uint32 { return &n }
func str(s string) *string { return &s }

// The default values are a working cluster: the QOS table the lab's e2e
// suites preempt with (test/lab/slurmconf.LabQOS), the login users and
// onepool's Slurm user each with an association allowed every QOS, and
// slurm.conf preempting by QOS.
func TestSlurmChartAccountingDefaults(t *testing.T) {
	h := newHelm(t)
	conf, job, out := slurmAccounting(t, h)
	assert.Equal(t, "onepool", conf.Cluster)
	assert.Equal(t, []accounting.QOS{
		{Name: "normal", Priority: u32(10), Preempt: &[]string{}, PreemptMode: str("cluster"), GraceTime: u32(30)},
		{Name: "low", Priority: u32(0), Preempt: &[]string{}, PreemptMode: str("cluster"), GraceTime: u32(30)},
		{Name: "high", Priority: u32(1000), Preempt: &[]string{"low", "normal"}, PreemptMode: str("cancel"), GraceTime: u32(0)},
	}, conf.QOS)
	all := []string{"normal", "low", "high"}
	assert.Equal(t, []accounting.Account{
		{Name: "users", Description: "login users", Organization: "onepool", Users: []accounting.User{{Name: "alice", QOS: all, DefaultQOS: "normal"}}},
		{Name: "onepool", Description: "onepool's placeholder jobs", Organization: "onepool", Users: []accounting.User{{Name: "slurm", QOS: all, DefaultQOS: "normal"}}},
	}, conf.Accounts)
	assert.True(t, strings.HasPrefix(job, "r-slurm-acct-setup-"), job)
	assert.Contains(t, out, "--slurmrest-url=http://r-slurm-restapi.ns.svc:6820")
	assert.Contains(t, out, "automountServiceAccountToken: false")

	cfg, stderr, err := h.run(append(labTemplateArgs(chartDir(t, "slurm"), nil), "--show-only", "templates/config.yaml")...)
	require.NoError(t, err, stderr)
	assert.Contains(t, cfg, "PreemptType=preempt/qos\n")
	assert.Contains(t, cfg, "PreemptMode=CANCEL\n")
	assert.Contains(t, cfg, "AccountingStorageEnforce=associations,limits,qos\n")
}

// The values' own accounts come first and win; the chart adds the login
// users and onepool's user unless the values name them in that account.
func TestSlurmChartAccountingFromValues(t *testing.T) {
	h := newHelm(t)
	values := filepath.Join(t.TempDir(), "accounting.yaml")
	require.NoError(t, os.WriteFile(values, []byte(`login:
  users: [{name: alice, uid: 2001}, {name: bob, uid: 2002}]
accounting:
  defaultQOS: low
  qos:
    - {name: low, priority: 5}
    - {name: inference, priority: 100, preempt: [low], preemptMode: requeue, graceTime: 120, maxTRESPerUser: "gres/gpu=8"}
  accounts:
    - name: users
      description: our users
      users: [{name: bob, qos: [low], defaultQOS: low}]
    - name: serving
      users: [{name: serving, qos: [inference]}]
`), 0o644))
	conf, job, _ := slurmAccounting(t, h, "-f", values)
	assert.Equal(t, []accounting.QOS{{Name: "low", Priority: u32(5)},
		{Name: "inference", Priority: u32(100), Preempt: &[]string{"low"}, PreemptMode: str("requeue"), GraceTime: u32(120), MaxTRESPerUser: str("gres/gpu=8")}}, conf.QOS)
	every := []string{"low", "inference"}
	assert.Equal(t, []accounting.Account{
		{Name: "users", Description: "our users", Organization: "onepool", Users: []accounting.User{
			{Name: "bob", QOS: []string{"low"}, DefaultQOS: "low"},
			{Name: "alice", QOS: every, DefaultQOS: "low"}}},
		{Name: "serving", Users: []accounting.User{{Name: "serving", QOS: []string{"inference"}}}},
		{Name: "onepool", Description: "onepool's placeholder jobs", Organization: "onepool", Users: []accounting.User{{Name: "slurm", QOS: every, DefaultQOS: "low"}}},
	}, conf.Accounts)

	_, again, _ := slurmAccounting(t, h, "-f", values)
	assert.Equal(t, job, again, "the same values, the same Job")
	_, other, _ := slurmAccounting(t, h, "-f", values, "--set", "accounting.qos[0].priority=6")
	assert.NotEqual(t, job, other, "other values, another Job: it runs again")

	conf, _, _ = slurmAccounting(t, h, "--set", "accounting.onepool.user=")
	assert.Equal(t, []string{"users"}, []string{conf.Accounts[0].Name}, "no onepool user: no onepool account")
	assert.Len(t, conf.Accounts, 1)
}

// Values ensure-accounting could not use fail at render, naming the value.
func TestSlurmChartRefusesBadAccountingValues(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"accounting.defaultQOS=gold"}, `accounting.defaultQOS "gold" is not in accounting.qos (normal, low, high)`},
		{[]string{"accounting.qos[0].name=Normal"}, "/accounting/qos/0/name"},
		{[]string{"accounting.qos[2].preemptMode=suspend"}, "/accounting/qos/2/preemptMode"},
		{[]string{"accounting.qos[2].graceTime=-1"}, "/accounting/qos/2/graceTime"},
		{[]string{"accounting.qos[2].maxTRESPerUser=8 gpus"}, "/accounting/qos/2/maxTRESPerUser"},
		{[]string{"accounting.qos[2].prio=1"}, "additional properties 'prio' not allowed"},
		{[]string{"accounting.accounts[0].name=team-a", "accounting.accounts[0].users[0].name=Bob"}, "/accounting/accounts/0/users/0/name"},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			args := labTemplateArgs(chartDir(t, "slurm"), tc.set)
			_, stderr, err := h.run(args...)
			require.Error(t, err, "helm %v rendered", args)
			assert.Contains(t, stderr, tc.want)
		})
	}
	// Without accounting there is nothing to keep.
	out, stderr, err := h.run(labTemplateArgs(chartDir(t, "slurm"), []string{"accounting.enabled=false"})...)
	require.NoError(t, err, stderr)
	assert.NotContains(t, out, "acct-setup")
}
