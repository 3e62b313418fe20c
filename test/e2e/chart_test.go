package e2e

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// helm lint is clean with the values the lab installs, and everything the
// chart renders is accepted by the lab's real apiserver (server-side dry
// run: admission, validation, RBAC escalation checks).
func TestChartLintsAndTheAPIServerAcceptsIt(t *testing.T) {
	l := lab.Shared(t)
	ctx := context.Background()
	dir, err := charts.Dir("onepool")
	require.NoError(t, err)
	out, err := l.Helm(ctx, "lint", dir, "-f", filepath.Join(dir, "ci", "lab-values.yaml"))
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "[WARNING]")
	assert.NotContains(t, string(out), "[ERROR]")

	// The chart's CRDs are the generated ones (`make generate` copies them).
	crds, err := filepath.Glob(filepath.Join(dir, "..", "..", "config", "crd", "bases", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, crds)
	for _, c := range crds {
		want, err := os.ReadFile(c)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, "crds", filepath.Base(c)))
		require.NoError(t, err, "the chart lacks CRD %s: run make generate", filepath.Base(c))
		assert.Equal(t, string(want), string(got), "charts/onepool/crds/%s differs from the generated CRD: run make generate", filepath.Base(c))
	}

	rendered, err := l.HelmTemplate(ctx, "--set", "metrics.serviceMonitor.enabled=false")
	require.NoError(t, err)
	// GitOps renders the chart again at every sync: nothing may differ
	// (a certificate or key made at render time would change each time).
	again, err := l.HelmTemplate(ctx, "--set", "metrics.serviceMonitor.enabled=false")
	require.NoError(t, err)
	assert.Equal(t, string(rendered), string(again), "two renders of the chart differ")
	f := filepath.Join(t.TempDir(), "onepool.yaml")
	require.NoError(t, os.WriteFile(f, rendered, 0o644))
	kubectl := adminKubectl(t, l, "apply", "--dry-run=server", "-f", f)
	for _, kind := range []string{"deployment.apps/onepool-controller-manager", "deployment.apps/onepool-scheduler",
		"service/onepool-scheduler-release", "poddisruptionbudget.policy/onepool-scheduler", "configmap/onepool-scheduler-config"} {
		assert.Contains(t, kubectl, kind+" created (server dry run)")
	}
}

// Values that break the schema fail `helm install` (template) with a
// message naming the value.
func TestChartRejectsBadValues(t *testing.T) {
	l := lab.Shared(t)
	for _, tc := range []struct{ set, want string }{
		{"slurm.restURL=", "/slurm/restURL"},
		{"slurm.tokenSecret.name=", "slurm.jwtKeySecret.name (the Secret with the cluster's jwt_hs256.key"},
		{"slurm.jwtKeySecret.name=slurm-jwt", "are both set"},
		{"slurm.tokenSecret.name=Bad_Name", "/slurm/tokenSecret/name"},
		{"slurm.caBundle.kee=ca.crt", "additional properties 'kee' not allowed"},
		{"scheduler.replicas=two", "/scheduler/replicas': got string, want integer"},
		{"scheduler.replica=3", "additional properties 'replica' not allowed"},
		{"slurm.staleAfter=soon", "/slurm/staleAfter"},
		{"scheduler.release.url=https://release:443", "/scheduler/release/url"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := l.HelmTemplate(context.Background(), "--set", tc.set)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The lab's controller manager and scheduler act as the chart's
// ServiceAccounts, and those cannot do what the components must not.
func TestComponentsRunAsTheChartsServiceAccountsWithLeastPrivilege(t *testing.T) {
	l := lab.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if !lab.ChartMode() { // the chart's pods run as their ServiceAccounts by construction (install_test.go checks it)
		args, err := l.DaemonCmdline("onepool-controller-manager")
		require.NoError(t, err)
		assert.True(t, slices.Contains(args, l.SAKubeconfig(lab.ControllerManagerSA)), "controller manager runs with %v", args)
		cfg, err := l.SchedulerConfig()
		require.NoError(t, err)
		assert.Contains(t, string(cfg), "kubeconfig: "+l.SAKubeconfig(lab.SchedulerSA))
	}

	cm, err := l.SAClient(lab.ControllerManagerSA)
	require.NoError(t, err)
	sched, err := l.SAClient(lab.SchedulerSA)
	require.NoError(t, err)
	nodes, err := sched.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	require.NoError(t, err, "the scheduler cannot list Nodes")
	require.NotEmpty(t, nodes.Items)
	node := nodes.Items[0].Name

	forbidden := func(what string, err error) {
		t.Helper()
		assert.True(t, apierrors.IsForbidden(err), "%s: want Forbidden, got %v", what, err)
	}
	forbidden("scheduler deletes a Node", sched.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}))
	_, err = sched.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("scheduler labels a Node", err)
	_, err = sched.CoreV1().Secrets(lab.SystemNamespace).List(ctx, metav1.ListOptions{})
	forbidden("scheduler lists Secrets", err)
	_, err = sched.CoreV1().Secrets(lab.SystemNamespace).Get(ctx, lab.PlaceholderKeySecret, metav1.GetOptions{})
	assert.NoError(t, err, "the scheduler reads its placeholder signing key (it made it at start)")
	_, err = sched.CoreV1().Secrets(lab.SystemNamespace).Get(ctx, "slurm-token", metav1.GetOptions{})
	forbidden("scheduler reads another Secret in its own namespace", err)
	_, err = sched.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("scheduler creates a Secret outside its namespace", err)
	_, err = cm.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	forbidden("controller manager lists Secrets in kube-system", err)
	_, err = cm.CoreV1().Secrets(lab.SystemNamespace).Get(ctx, "slurm-token", metav1.GetOptions{})
	forbidden("controller manager reads a Secret in its own namespace", err)
	forbidden("controller manager deletes a Node", cm.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}))
	_, err = cm.CoreV1().ServiceAccounts(lab.SystemNamespace).CreateToken(ctx, lab.SchedulerSA, nil, metav1.CreateOptions{})
	forbidden("controller manager mints the scheduler's token", err)
	_, err = cm.CoordinationV1().Leases(lab.SystemNamespace).Get(ctx, lab.SchedulerLease, metav1.GetOptions{})
	forbidden("controller manager reads the scheduler's lease", err)
	_, err = sched.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	forbidden("scheduler creates a ConfigMap", err)
	_, err = sched.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	forbidden("scheduler lists ClusterRoles", err)
}

// adminKubectl runs the lab's kubectl as admin and returns its output.
func adminKubectl(t *testing.T, l *lab.Lab, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := osexec.CommandContext(ctx, l.Kubectl(), append([]string{"--kubeconfig", l.Kubeconfig()}, args...)...).CombinedOutput()
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}
