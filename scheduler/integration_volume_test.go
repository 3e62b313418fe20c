package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// itBoundVolume (TestIntegrationScheduler): a pod whose claim is bound to
// a PersistentVolume with node affinity for one Node has its job leave out
// the other, and binds where Slurm starts it.
func itBoundVolume(t *testing.T, s *itEnv) {
	t.Parallel()
	e := s.namespace(t, "volume", v1alpha1.TenantPolicySpec{}, 2)
	ctx := context.Background()
	const key = "it.onepool.dev/volume"
	patch := `{"metadata":{"labels":{"` + key + `":"` + e.ns + `"}}}`
	_, err := e.kc.CoreV1().Nodes().Patch(ctx, e.node(1), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	pv := localPV(e.ns, nil)
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{e.ns}}}}}}}
	pvc, pv := boundClaim(e.ns, "data", pv)
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvc.Spec.AccessModes = pv.Spec.AccessModes
	pvc.Spec.Resources.Requests = pv.Spec.Capacity
	_, err = e.kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = e.kc.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	_, err = e.kc.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)
	// Slurm's node names, read for another test a moment ago, are read
	// again for a node they lack after slurmNodeNamesMiss.
	time.Sleep(slurmNodeNamesMiss + 100*time.Millisecond)
	pod := withClaim(podWith(nil, 1, "", ""), "data")
	pod.Name, pod.Namespace, pod.UID = "stateful", e.ns, ""
	pod.Spec.SchedulerName = keys.SchedulerName
	pod.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
	_, err = e.kc.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	ask := e.submitted("stateful")
	assert.Contains(t, ask.Job.ExcludedNodes, e.node(0))
	assert.NotContains(t, ask.Job.ExcludedNodes, e.node(1))
	s.slurm.does().start(ask.ID, e.node(1))
	assert.Equal(t, e.node(1), e.bound("stateful"))
}
