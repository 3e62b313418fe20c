package charts

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestTheLabsValuesAreInTheCharts(t *testing.T) {
	dir, err := Dir("onepool")
	require.NoError(t, err)
	for _, v := range Values(dir) {
		assert.FileExists(t, v)
	}
	args := UpgradeArgs(dir, "--wait")
	assert.Equal(t, []string{"upgrade", "--install", Release, dir, "--namespace", Namespace}, args[:6])
	assert.Equal(t, "--wait", args[len(args)-1], "extra arguments come last, so they win")
	sdir, err := Dir("slurm")
	require.NoError(t, err)
	sargs := SlurmUpgradeArgs(sdir, SlurmNode{JailHostPath: "/j", KubeletDir: "/k", CDIDir: "/c"}, "--set", "x=1")
	assert.FileExists(t, sargs[8], "the slurm chart's lab values")
	assert.Subset(t, sargs, []string{"jail.hostPath=/j", "dra.kubeletDir=/k", "dra.cdiDir=/c"})
	assert.Equal(t, []string{"--set", "x=1"}, sargs[len(sargs)-2:])
	_, err = Dir("no-such-chart")
	assert.ErrorContains(t, err, "charts/no-such-chart")
}

func TestHelmRunsWithTheLabsKubeconfigAndSaysWhyItFailed(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "helm")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho \"$KUBECONFIG $HELM_DATA_HOME $*\"\n[ \"$1\" = fail ] && { echo 'Error: release: not found' >&2; exit 1; }\nexit 0\n"), 0o755))
	h := Helm{Bin: bin, Kubeconfig: "/lab/kubeconfig", Home: "/lab/helm"}
	out, err := h.Run(context.Background(), "list", "-A")
	require.NoError(t, err)
	assert.Equal(t, "/lab/kubeconfig /lab/helm/data list -A\n", string(out))
	_, err = h.Run(context.Background(), "fail")
	assert.ErrorContains(t, err, "Error: release: not found")
}

func pod(name string, phase corev1.PodPhase, ready bool, restarts int32) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/instance": Release}},
		Spec:   corev1.PodSpec{NodeName: "lab-node"},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: ready, RestartCount: restarts}}}}
}

func deployment(name string, want, ready int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Generation: 2},
		Spec:   appsv1.DeploymentSpec{Replicas: ptr.To(want)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: want, UpdatedReplicas: want, ReadyReplicas: ready, AvailableReplicas: ready}}
}

func TestRolledOutAndLeader(t *testing.T) {
	cm, sched := Deployments[0], Deployments[1]
	p1, p2, p3 := pod(cm+"-a", corev1.PodRunning, true, 0), pod(sched+"-a", corev1.PodRunning, true, 0), pod(sched+"-b", corev1.PodPending, false, 2)
	kc := fake.NewClientset(deployment(cm, 1, 1), deployment(sched, 2, 1), &p1, &p2, &p3,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: SchedulerLease, Namespace: Namespace}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(sched + "-a_0f3c")}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ControllerManagerLease, Namespace: Namespace}})
	ctx := context.Background()
	done, state := RolledOut(ctx, kc)
	assert.False(t, done, "one scheduler replica is not ready")
	assert.Contains(t, state, sched+"-b@lab-node: Pending ready=false restarts=2")
	leader, err := Leader(ctx, kc, sched, SchedulerLease)
	require.NoError(t, err)
	assert.Equal(t, sched+"-a", leader)
	leader, err = Leader(ctx, kc, cm, ControllerManagerLease)
	require.NoError(t, err)
	assert.Empty(t, leader, "a lease nobody holds")

	kc = fake.NewClientset(deployment(cm, 1, 1), deployment(sched, 1, 1), &p1, &p2)
	done, state = RolledOut(ctx, kc)
	assert.True(t, done, state)
}

func TestSinfoNodeStates(t *testing.T) {
	got, err := SinfoNodeStates([]byte("lab-node idle\ndyn-0 drained\n\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"lab-node": "idle", "dyn-0": "drained"}, got)
	_, err = SinfoNodeStates([]byte("\n"))
	assert.ErrorContains(t, err, "no node")
}
