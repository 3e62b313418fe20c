package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// The slurm chart installed the GitOps way (`helm template | kubectl
// apply`, as Argo CD and Flux render it): the munge key, the JWT key and
// the database password are made once in the cluster by the keys Job, and
// a second render applied, or the Job run again (a TTL, a deleted Job),
// leaves them as they were. Before, each render made new keys (Helm's
// lookup sees nothing under `helm template`) and broke munge and JWT.
func TestSlurmChartKeysSurviveGitOpsRenders(t *testing.T) {
	s := newSlurmChart(t) // its cleanup removes the namespace, keys and all
	l := s.l
	ctx := context.Background()
	kc, err := l.KubeClient()
	require.NoError(t, err)
	dir, err := charts.Dir("slurm")
	require.NoError(t, err)
	render := func() string {
		t.Helper()
		out, err := l.Helm(ctx, "template", lab.SlurmRelease, dir, "--namespace", lab.SlurmNamespace,
			"-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--kube-version", "1.35.4", "--show-only", "templates/secrets.yaml")
		require.NoError(t, err, "%s", out)
		f := filepath.Join(t.TempDir(), "keys.yaml")
		require.NoError(t, os.WriteFile(f, out, 0o644))
		return f
	}
	adminKubectl(t, l, "create", "namespace", lab.SlurmNamespace)
	secrets := []string{lab.SlurmRelease + "-munge", lab.SlurmRelease + "-jwt", lab.SlurmRelease + "-db"}
	keysNow := func() (map[string]map[string][]byte, string) {
		got := map[string]map[string][]byte{}
		for _, name := range secrets {
			sec, err := kc.CoreV1().Secrets(lab.SlurmNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err.Error()
			}
			got[name] = sec.Data
		}
		return got, ""
	}
	jobDoneOnce := func(what string) {
		t.Helper()
		eventually(t, 3*time.Minute, what, func() (bool, string) {
			jobs, err := kc.BatchV1().Jobs(lab.SlurmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=keys"})
			if err != nil || len(jobs.Items) != 1 {
				return false, "jobs: " + errString(err)
			}
			j := jobs.Items[0]
			return j.Status.Succeeded > 0, j.Name + ": " + j.Status.String()
		})
	}

	adminKubectl(t, l, "apply", "-f", render())
	jobDoneOnce("the keys Job made the Secrets")
	first, why := keysNow()
	require.Empty(t, why)
	assert.Len(t, first[secrets[0]]["munge.key"], 1024)
	assert.Len(t, first[secrets[1]]["jwt_hs256.key"], 32)
	assert.Regexp(t, `^[A-Za-z0-9]{32}$`, string(first[secrets[2]]["password"]))

	// What every sync does: render again and apply; then the Job made again.
	adminKubectl(t, l, "apply", "-f", render())
	adminKubectl(t, l, "-n", lab.SlurmNamespace, "delete", "job", "-l", "app.kubernetes.io/component=keys", "--wait=true")
	adminKubectl(t, l, "apply", "-f", render())
	jobDoneOnce("the keys Job ran again")
	again, why := keysNow()
	require.Empty(t, why)
	assert.Equal(t, first, again, "the keys changed between renders")
}
