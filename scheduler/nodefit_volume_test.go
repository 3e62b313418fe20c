package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"
)

// volumeFit is a NodeFit on a framework handle, as the plugin's, over a
// fake API server holding objs; its informers started and synced.
func volumeFit(t testing.TB, objs ...runtime.Object) (*NodeFit, informers.SharedInformerFactory, *fake.Clientset) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := fake.NewClientset(objs...)
	inf := informers.NewSharedInformerFactory(kube, 0)
	h, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithClientSet(kube), frameworkruntime.WithInformerFactory(inf))
	require.NoError(t, err)
	fit, err := NewNodeFit(ctx, h)
	require.NoError(t, err)
	inf.Core().V1().Nodes().Informer() // the manager's lister, in the tests that use one
	inf.Start(ctx.Done())
	for typ, ok := range inf.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "%v synced", typ)
	}
	return fit, inf, kube
}

func zoned(name, zone string) *corev1.Node {
	return node(name, map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone})
}

// boundClaim is a PVC bound to a PV (as the PV controller leaves them).
func boundClaim(ns, name string, pv *corev1.PersistentVolume) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name, StorageClassName: ptr.To("")},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	pv = pv.DeepCopy()
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: name}
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv.Status.Phase = corev1.VolumeBound
	return pvc, pv
}

func localPV(name string, labels map[string]string, nodes ...string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}}
	if len(nodes) > 0 {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}}
	}
	return pv
}

func withClaim(pod *corev1.Pod, claim string) *corev1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return pod
}

// NodeFit runs kube-scheduler's VolumeBinding and VolumeZone filters with
// the plugin's handle: the Nodes a pod's volumes rule out are unfit with
// their words; a pod no Node can take now is Unplaceable.
func TestNodeFitVolumeTopology(t *testing.T) {
	pool := []*corev1.Node{zoned("node-a", "z1"), zoned("node-b", "z1"), zoned("node-c", "z2"), node("node-d", nil)}
	affine, affinePV := boundClaim("ns", "affine", localPV("pv-affine", nil, "node-a"))
	zonal, zonalPV := boundClaim("ns", "zonal", localPV("pv-zonal", map[string]string{corev1.LabelTopologyZone: "z2"}))
	immediate := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "immediate"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("standard")}}
	late := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("zone-1"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	classes := []runtime.Object{
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "example.com/disk",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "zone-1"}, Provisioner: "example.com/disk",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: corev1.LabelTopologyZone, Values: []string{"z1"}}}}}},
	}
	fit, _, _ := volumeFit(t, append(classes, affine, affinePV, zonal, zonalPV, immediate, late)...)

	for _, tc := range []struct {
		name        string
		claims      []string
		want        map[string][]string
		unplaceable string
	}{
		{name: "no volumes: nothing unfit", want: map[string][]string{}},
		{name: "a PV with node affinity for node-a: every other Node is unfit", claims: []string{"affine"}, want: map[string][]string{
			"node-b": {"node(s) didn't match PersistentVolume's node affinity"},
			"node-c": {"node(s) didn't match PersistentVolume's node affinity"},
			"node-d": {"node(s) didn't match PersistentVolume's node affinity"},
		}},
		{name: "a PV of zone z2: the Nodes of other zones are unfit, one without a zone is not", claims: []string{"zonal"}, want: map[string][]string{
			"node-a": {"node(s) had no available volume zone"},
			"node-b": {"node(s) had no available volume zone"},
		}},
		{name: "a WaitForFirstConsumer claim whose class allows z1 only", claims: []string{"late"}, want: map[string][]string{
			"node-c": {"node(s) didn't find available persistent volumes to bind"},
			"node-d": {"node(s) didn't find available persistent volumes to bind"},
		}},
		{name: "both bound claims: each Node's first reason", claims: []string{"affine", "zonal"}, want: map[string][]string{
			"node-b": {"node(s) didn't match PersistentVolume's node affinity"},
			"node-c": {"node(s) didn't match PersistentVolume's node affinity"},
			"node-d": {"node(s) didn't match PersistentVolume's node affinity"},
			"node-a": {"node(s) had no available volume zone"},
		}},
		{name: "an unbound immediate claim: no Node can take the pod now", claims: []string{"immediate"},
			unplaceable: "pod has unbound immediate PersistentVolumeClaims"},
		{name: "a claim that does not exist", claims: []string{"missing"},
			unplaceable: `persistentvolumeclaim "missing" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := podWith(nil, 1, "", "")
			for _, c := range tc.claims {
				withClaim(pod, c)
			}
			unfit, err := fit.Unfit(context.Background(), pod, pool)
			if tc.unplaceable != "" {
				var nowhere *Unplaceable
				require.ErrorAs(t, err, &nowhere)
				assert.Equal(t, tc.unplaceable, nowhere.Error())
				assert.Equal(t, "VolumeBinding", nowhere.Plugin)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, unfit)
		})
	}
}

// A pod without claims costs the volume filters one look at its volumes:
// their PreFilters skip it, so they filter no Node.
func TestNodeFitVolumeFiltersSkipPodsWithoutClaims(t *testing.T) {
	fit, _, _ := volumeFit(t)
	require.Len(t, fit.filters, 6)
	pod := podWith(nil, 1, "", "")
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, fl := range fit.filters[4:] {
		_, st := fl.pre.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
		assert.True(t, st.IsSkip(), "%s: %v", fl.Name(), st)
	}
	nilFit, err := NewNodeFit(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, nilFit.filters, 4, "without a handle, only the node filters")
}

// A pod whose claim is not bound yet asks Slurm nothing and says why; the
// claim's binding wakes it (not a claim of another pod) and its job then
// leaves out the Nodes its volume rules out.
func TestCoreWaitsForAnUnboundClaimAndWakesWhenItBinds(t *testing.T) {
	pv := localPV("pv-1", nil, "gpu-2")
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("")}}
	fit, inf, kube := volumeFit(t, pv, claim, node("gpu-1", map[string]string{corev1.LabelHostname: "gpu-1"}),
		node("gpu-2", map[string]string{corev1.LabelHostname: "gpu-2"}))
	f := newCoreFixture(t)
	rec := events.NewFakeRecorder(10)
	f.core.fitter.fit, f.core.fitter.nodes = fit, inf.Core().V1().Nodes().Lister()
	f.record(rec)
	withClaim(f.pod, "data")
	f.core.podChanged(nil, f.pod)
	submit := func() {
		f.core.Place(f.pod)
		key, _ := f.core.submitQ.Get()
		require.NoError(t, f.core.sub.submit(context.Background(), key))
		f.core.submitQ.Done(key)
	}

	submit()
	assert.Empty(t, f.slurm.submitted, "a job was asked for a pod whose claim is not bound")
	assert.Equal(t, "no Slurm node fits the pod: pod has unbound immediate PersistentVolumeClaims", f.core.Place(f.pod).Message)
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Warning NoSlurmNodeFits no Slurm node fits the pod: pod has unbound immediate PersistentVolumeClaims")

	// Another pod's claim changes: the pod sleeps on.
	other := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", ResourceVersion: "2"}}
	f.woken = nil
	f.core.VolumeEventHandler().OnAdd(other, false)
	assert.Empty(t, f.woken)

	// The PV controller binds its claim.
	bound, boundPV := boundClaim("ns", "data", pv)
	_, err := kube.CoreV1().PersistentVolumes().Update(context.Background(), boundPV, metav1.UpdateOptions{})
	require.NoError(t, err)
	bound, err = kube.CoreV1().PersistentVolumeClaims("ns").Update(context.Background(), bound, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := inf.Core().V1().PersistentVolumeClaims().Lister().PersistentVolumeClaims("ns").Get("data")
		return err == nil && c.Spec.VolumeName != ""
	}, 5*time.Second, 10*time.Millisecond)
	f.core.VolumeEventHandler().OnUpdate(claim, bound)
	assert.Equal(t, []string{"p"}, f.woken)
	submit()
	require.Len(t, f.slurm.submitted, 1)
	assert.Equal(t, []string{"gpu-1"}, f.slurm.submitted[0].ExcludedNodes)
}

// A PersistentVolume or StorageClass that changes wakes every pod with a
// claim, and no pod without one; a resync wakes none.
func TestVolumeEventsWakeOnlyPodsWithClaims(t *testing.T) {
	f := newCoreFixture(t)
	key := ownerOf(f.pod).key()
	f.core.Place(f.pod)
	p := f.core.rec.s.places[key]
	p.unfit, p.submitting = "no Slurm node fits the pod: ...", false
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard", ResourceVersion: "1"}}
	f.woken = nil
	f.core.VolumeEventHandler().OnAdd(sc, false)
	assert.Empty(t, f.woken, "a pod without claims was woken")

	withClaim(f.pod, "data")
	f.core.podChanged(nil, f.pod)
	f.woken = nil
	f.core.VolumeEventHandler().OnUpdate(sc, sc)
	assert.Empty(t, f.woken, "a resync woke a pod")
	pv := localPV("pv-1", nil)
	pv.ResourceVersion = "3"
	f.core.VolumeEventHandler().OnAdd(pv, false)
	assert.Equal(t, []string{"p"}, f.woken)
}
