package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// slurmTemplate renders charts/slurm as the lab would install it, with
// extra helm arguments.
func slurmTemplate(t *testing.T, l *lab.Lab, extra ...string) ([]byte, error) {
	t.Helper()
	dir, err := charts.Dir("slurm")
	require.NoError(t, err)
	args := append([]string{"template", "slurm", dir, "--namespace", "default", "-f", filepath.Join(dir, "ci", "lab-values.yaml"),
		"--kube-version", "1.35.4"}, extra...)
	return l.Helm(context.Background(), args...)
}

// helm lint of charts/slurm is clean, and the lab's real apiserver accepts
// everything it renders (server-side dry run; the NodeSet CRD is the
// onepool chart's).
func TestSlurmChartLintsAndTheAPIServerAcceptsIt(t *testing.T) {
	l := lab.Shared(t)
	dir, err := charts.Dir("slurm")
	require.NoError(t, err)
	out, err := l.Helm(context.Background(), "lint", dir, "-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--kube-version", "1.35.4")
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "[WARNING]")
	assert.NotContains(t, string(out), "[ERROR]")

	rendered, err := slurmTemplate(t, l)
	require.NoError(t, err)
	again, err := slurmTemplate(t, l)
	require.NoError(t, err)
	assert.Equal(t, string(rendered), string(again), "two renders of the chart differ (GitOps renders at every sync)")
	f := filepath.Join(t.TempDir(), "slurm.yaml")
	require.NoError(t, os.WriteFile(f, rendered, 0o644))
	kubectl := adminKubectl(t, l, "apply", "--dry-run=server", "-f", f)
	for _, obj := range []string{"statefulset.apps/slurm-controller", "service/slurm-controller", "deployment.apps/slurm-restapi",
		"deployment.apps/slurm-accounting", "statefulset.apps/slurm-mariadb", "deployment.apps/slurm-login",
		"nodeset.onepool.dev/slurm-gpu", "configmap/slurm-config",
		// The keys are made by a Job in the cluster, not rendered.
		"serviceaccount/slurm-keys", "role.rbac.authorization.k8s.io/slurm-keys", "rolebinding.rbac.authorization.k8s.io/slurm-keys", "job.batch/slurm-keys-",
		// The DRA driver's account, kept to its own node's ResourceSlices.
		"validatingadmissionpolicy.admissionregistration.k8s.io/slurm-slurmd-default-own-node",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/slurm-slurmd-default-own-node"} {
		if strings.HasSuffix(obj, "-") { // a name with a hash
			assert.Regexp(t, regexp.QuoteMeta(obj)+`[0-9a-f]{8} created \(server dry run\)`, kubectl)
			continue
		}
		assert.Contains(t, kubectl, obj+" created (server dry run)")
	}
	assert.NotContains(t, kubectl, "secret/", "a key rendered by the chart would change at every render")
}

// Values Slurm could not use fail at `helm install` with a message naming
// the value: the schema, or the chart's own cross-checks.
func TestSlurmChartRejectsBadValues(t *testing.T) {
	l := lab.Shared(t)
	badPartition := filepath.Join(t.TempDir(), "bad-partition.yaml")
	require.NoError(t, os.WriteFile(badPartition, []byte(`partitions:
  - {name: gpu, nodeSets: [gpu], default: true, maxTime: INFINITE}
  - {name: big, nodeSets: [h200], maxTime: "1-00:00:00"}
`), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", badPartition}, `partition "big" holds NodeSet "h200", which is not in nodeSets (gpu)`},
		{[]string{"--set", "slurmctld.persistence.size=lots"}, "/slurmctld/persistence/size"},
		{[]string{"--set", "slurmctld.persistence.accessModes[0]=ReadWriteSometimes"}, "/slurmctld/persistence/accessModes/0"},
		{[]string{"--set", "prolog.scripts.check=exit 1"}, "/prolog/scripts/check"},
		{[]string{"--set", "clusterName=My Cluster"}, "/clusterName"},
		{[]string{"--set", "login.users[0].name=alice,login.users[0].uid=0"}, "/login/users/0/uid"},
		{[]string{"--set", "jail.root=relative/path"}, "/jail/root"},
		{[]string{"--set", "onepoolRelease.url=onepool-scheduler-release:10270"}, "/onepoolRelease/url"},
		{[]string{"--set", "onepoolRelease.url=http://a:1", "--set", "onepoolRelease.timeout=soon"}, "/onepoolRelease/timeout"},
		{[]string{"--set", "partition=gpu"}, "additional properties 'partition' not allowed"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := slurmTemplate(t, l, tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// With onepoolRelease.url, slurmd runs onepool's release epilog as an
// Epilog of its own (admin epilogs stay as they are), mounted from a
// ConfigMap, executable; without it there is none.
func TestSlurmChartRendersOnepoolsReleaseEpilog(t *testing.T) {
	l := lab.Shared(t)
	const url = "http://onepool-scheduler-release.onepool-system.svc:10270"
	out, err := slurmTemplate(t, l, "--set", "onepoolRelease.url="+url, "--set", "epilog.scripts.site=#!/bin/sh\ntrue")
	require.NoError(t, err, "%s", out)
	r := string(out)
	assert.Contains(t, r, "Epilog=/etc/slurm/epilog.d/*")
	assert.Contains(t, r, "Epilog=/etc/slurm/epilog.onepool.d/*")
	assert.Contains(t, r, `exec /usr/local/bin/onepool-node-agent release-wait --release-url "`+url+`" --timeout 90s`)
	assert.Contains(t, r, "mountPath: /etc/slurm/epilog.onepool.d")
	assert.Contains(t, r, "name: slurm-onepool-epilog\n          defaultMode: 0755")

	out, err = slurmTemplate(t, l)
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "epilog.onepool.d")
}
