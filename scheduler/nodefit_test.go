package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

// What the pod says about nodes becomes the Slurm nodes its job leaves
// out, decided by kube-scheduler's own Filter plugins; with no Slurm node
// left the reason is theirs, counted per node.
func TestNodeConstraintsToSlurm(t *testing.T) {
	h100 := map[string]string{"nvidia.com/gpu.product": "H100"}
	a100 := map[string]string{"nvidia.com/gpu.product": "A100"}
	noExec := corev1.Taint{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}
	cordoned := node("gpu-3", h100)
	cordoned.Spec.Unschedulable = true
	pool := []*corev1.Node{
		node("gpu-0", h100), node("gpu-1", a100), node("gpu-2", h100, noExec), cordoned,
		node("cp-0", nil, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}), // not a Slurm node
		node("k8s-name-7", a100), // Slurm node gpu-7 by the label
	}
	pool[5].Labels = map[string]string{"nvidia.com/gpu.product": "A100", keys.LabelSlurmNodeName: "gpu-7"}
	pool[1].Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	slurm := map[string]bool{"gpu-0": true, "gpu-1": true, "gpu-2": true, "gpu-3": true, "gpu-7": true, "gpu-9": true}
	tolerate := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "training", Effect: corev1.TaintEffectNoSchedule}

	for _, tc := range []struct {
		name         string
		pod          func(*corev1.Pod)
		wantExcluded []string
		wantMsg      string
	}{
		{name: "no constraint: only the cordoned and tainted nodes", pod: func(*corev1.Pod) {},
			wantExcluded: []string{"gpu-2", "gpu-3"}},
		{name: "a node selector for the H100s", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = h100 },
			wantExcluded: []string{"gpu-1", "gpu-2", "gpu-3", "gpu-7"}},
		{name: "a toleration opens the tainted node", pod: func(p *corev1.Pod) {
			p.Spec.NodeSelector = h100
			p.Spec.Tolerations = []corev1.Toleration{tolerate}
		}, wantExcluded: []string{"gpu-1", "gpu-3", "gpu-7"}},
		{name: "required node affinity, NotIn", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"H100"}}}}}}}}
		}, wantExcluded: []string{"gpu-0", "gpu-2", "gpu-3"}},
		{name: "a Node not ready for now is not left out", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = a100 },
			wantExcluded: []string{"gpu-0", "gpu-2", "gpu-3"}},
		{name: "a selector no Slurm node matches", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "B200"} },
			wantMsg: "no Slurm node fits the pod: 3 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit, err := NewNodeFit(context.Background(), nil)
			require.NoError(t, err)
			pod := podWith(nil, 1, "", "")
			tc.pod(pod)
			unfit, err := fit.Unfit(context.Background(), pod, pool)
			require.NoError(t, err)
			excluded, msg := constraintsFor([]map[string][]string{unfit}, pool, slurm)
			assert.Equal(t, tc.wantExcluded, excluded)
			assert.Equal(t, tc.wantMsg, msg)
		})
	}
}

// A gang's job leaves out the nodes none of its pods can use: its pods are
// matched to the nodes Slurm gives after the allocation.
func TestNodeConstraintsOfAGang(t *testing.T) {
	pool := []*corev1.Node{node("a", map[string]string{"zone": "1"}), node("b", map[string]string{"zone": "2"}), node("c", nil)}
	fit, err := NewNodeFit(context.Background(), nil)
	require.NoError(t, err)
	p1, p2 := podWith(nil, 1, "", ""), podWith(nil, 1, "", "")
	p1.Spec.NodeSelector = map[string]string{"zone": "1"}
	p2.Spec.NodeName = "b"
	u1, err := fit.Unfit(context.Background(), p1, pool)
	require.NoError(t, err)
	u2, err := fit.Unfit(context.Background(), p2, pool)
	require.NoError(t, err)
	excluded, msg := constraintsFor([]map[string][]string{u1, u2}, pool, map[string]bool{"a": true, "b": true, "c": true})
	assert.Equal(t, []string{"c"}, excluded)
	assert.Empty(t, msg)
}

// The manager tells Slurm the nodes to leave out; when no Slurm node fits it
// asks nothing, says why on the pod (message and one Warning event), and
// asks once a Node changes so that one fits.
func TestCoreSubmitsNodeConstraints(t *testing.T) {
	f := newCoreFixture(t)
	rec := events.NewFakeRecorder(10)
	f.record(rec)
	fit, err := NewNodeFit(context.Background(), nil)
	require.NoError(t, err)
	nodes := []*corev1.Node{node("gpu-1", map[string]string{"pool": "a"}), node("gpu-2", map[string]string{"pool": "b"})}
	kube := fake.NewSimpleClientset()
	inf := informers.NewSharedInformerFactory(kube, 0)
	for _, n := range nodes {
		require.NoError(t, inf.Core().V1().Nodes().Informer().GetIndexer().Add(n))
	}
	f.core.fitter.nodes, f.core.fitter.fit = inf.Core().V1().Nodes().Lister(), fit
	f.core.fitter.slurmNodes = func(context.Context, []string) (map[string]bool, error) {
		return map[string]bool{"gpu-1": true, "gpu-2": true}, nil
	}
	submitOnce := func() {
		f.core.Place(f.pod)
		key, _ := f.core.submitQ.Get()
		require.NoError(t, f.core.sub.submit(context.Background(), key))
		f.core.submitQ.Done(key)
	}

	f.pod.Spec.NodeSelector = map[string]string{"pool": "c"}
	f.core.podChanged(nil, f.pod)
	submitOnce()
	assert.Empty(t, f.slurm.submitted, "a job was asked though no Slurm node fits")
	assert.NotEmpty(t, f.core.rec.s.places[ownerOf(f.pod).key()].unfit)
	d := f.core.Place(f.pod)
	assert.Equal(t, "no Slurm node fits the pod: 2 node(s) didn't match Pod's node affinity/selector", d.Message)
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Warning NoSlurmNodeFits no Slurm node fits the pod")

	// The same answer again: no second event.
	key, _ := f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	f.core.submitQ.Done(key)
	assert.Empty(t, rec.Events)

	// A Node labelled pool=c appears: the job is asked, the other node left out.
	n3 := node("gpu-3", map[string]string{"pool": "c"})
	require.NoError(t, inf.Core().V1().Nodes().Informer().GetIndexer().Add(n3))
	f.core.fitter.slurmNodes = func(context.Context, []string) (map[string]bool, error) {
		return map[string]bool{"gpu-1": true, "gpu-2": true, "gpu-3": true}, nil
	}
	submitOnce()
	require.Len(t, f.slurm.submitted, 1)
	assert.Equal(t, []string{"gpu-1", "gpu-2"}, f.slurm.submitted[0].ExcludedNodes)
	assert.Empty(t, f.core.rec.s.places[ownerOf(f.pod).key()].unfit)
}

// Slurm's node names are read once per TTL and again after it, or sooner
// (at most once a second) for a node they lack.
func TestSlurmNodeNamesAreKeptForATTL(t *testing.T) {
	reads := 0
	s := &slurmNodeNames{ttl: time.Hour, list: func(context.Context, time.Time) (*slurmrest.NodeList, error) {
		reads++
		return &slurmrest.NodeList{Nodes: []slurmrest.Node{{Name: "gpu-0"}}}, nil
	}}
	for range 3 {
		names, err := s.get(context.Background(), []string{"gpu-0"})
		require.NoError(t, err)
		assert.Equal(t, map[string]bool{"gpu-0": true}, names)
	}
	assert.Equal(t, 1, reads)
	// A node Slurm did not have a moment ago: not read again at once...
	_, err := s.get(context.Background(), []string{"gpu-1"})
	require.NoError(t, err)
	assert.Equal(t, 1, reads)
	// ...but after slurmNodeNamesMiss.
	s.at = time.Now().Add(-2 * slurmNodeNamesMiss)
	_, err = s.get(context.Background(), []string{"gpu-1"})
	require.NoError(t, err)
	assert.Equal(t, 2, reads)
	_, err = s.get(context.Background(), []string{"gpu-0"})
	require.NoError(t, err)
	assert.Equal(t, 2, reads)
	s.at = time.Now().Add(-2 * time.Hour)
	_, err = s.get(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, 3, reads)
}

// A pod that says nothing about nodes costs no read of Slurm's nodes and
// its job leaves nothing out.
func TestCoreUnconstrainedPodReadsNoSlurmNodes(t *testing.T) {
	f := newCoreFixture(t)
	fit, err := NewNodeFit(context.Background(), nil)
	require.NoError(t, err)
	f.core.fitter.fit = fit
	f.core.fitter.slurmNodes = func(context.Context, []string) (map[string]bool, error) {
		t.Error("Slurm's nodes were read for a pod without node constraints")
		return nil, nil
	}
	f.core.Place(f.pod)
	key, _ := f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	f.core.submitQ.Done(key)
	require.Len(t, f.slurm.submitted, 1)
	assert.Empty(t, f.slurm.submitted[0].ExcludedNodes)
}

// A job Slurm started on a node the pod cannot use (the Node changed after
// the job was asked) is given back at once with an event, and the next job
// leaves that node out.
func TestCoreGivesBackAJobOnANodeThePodCannotUse(t *testing.T) {
	f := newCoreFixture(t)
	rec := events.NewFakeRecorder(10)
	f.record(rec)
	f.pod.Spec.NodeSelector = map[string]string{"pool": "a"}
	f.core.podChanged(nil, f.pod)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1")) // gpu-1 has no pool=a label
	d := f.core.Place(f.pod)
	assert.Empty(t, d.Node)
	assert.Contains(t, d.Message, "Slurm job 7 started on gpu-1, where the pod cannot run (node(s) didn't match Pod's node affinity/selector)")
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "Warning SlurmJobMisplaced Slurm job 7 started on gpu-1")
	_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
	require.NoError(t, err)
	assert.Contains(t, f.slurm.cancelled, uint32(7))
	assert.Equal(t, 200, f.core.rel.answer(context.Background(), 7).code, "the given-back job's placeholder must let go at once")

	// The fixture's Nodes: gpu-1 only; label a second one for the pod.
	n2 := node("gpu-2", map[string]string{"pool": "a"})
	kube := fake.NewSimpleClientset()
	inf := informers.NewSharedInformerFactory(kube, 0)
	n1, err := f.core.fitter.nodes.Get("gpu-1")
	require.NoError(t, err)
	n1.Labels = map[string]string{"pool": "a"} // changed back: still avoided
	for _, n := range []*corev1.Node{n1, n2} {
		require.NoError(t, inf.Core().V1().Nodes().Informer().GetIndexer().Add(n))
	}
	f.core.fitter.nodes = inf.Core().V1().Nodes().Lister()
	key, _ := f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	f.core.submitQ.Done(key)
	require.Len(t, f.slurm.submitted, 1)
	assert.Equal(t, []string{"gpu-1"}, f.slurm.submitted[0].ExcludedNodes)
}

// A pod with a GPU claim leaves out the Slurm nodes whose Node publishes no
// devices of onepool's DRA driver (its claim could never be allocated
// there); with none publishing, it asks Slurm nothing and says why. A pod
// without a claim is not concerned.
func TestCoreGPUClaimPodLeavesOutNodesWithoutDevices(t *testing.T) {
	f := newCoreFixture(t)
	kube := fake.NewSimpleClientset()
	inf := informers.NewSharedInformerFactory(kube, 0)
	for _, n := range []*corev1.Node{node("gpu-1", nil), node("gpu-2", nil)} {
		require.NoError(t, inf.Core().V1().Nodes().Informer().GetIndexer().Add(n))
	}
	f.core.fitter.nodes = inf.Core().V1().Nodes().Lister()
	f.core.claimer.slices = inf.Resource().V1().ResourceSlices().Lister()
	f.core.fitter.slices = f.core.claimer.slices
	f.pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus")}}
	f.pod.Annotations = map[string]string{keys.AnnotationGPUs: "1"}
	f.pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	f.core.podChanged(nil, f.pod)
	submit := func() {
		f.core.Place(f.pod)
		key, _ := f.core.submitQ.Get()
		require.NoError(t, f.core.sub.submit(context.Background(), key))
		f.core.submitQ.Done(key)
	}

	submit()
	assert.Empty(t, f.slurm.submitted)
	assert.Equal(t, "no Slurm node fits the pod: 2 node(s) publish no GPU devices of gpu.onepool.dev (DRA)", f.core.Place(f.pod).Message)

	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: keys.GPUDriverName, Pool: resourceapi.ResourcePool{Name: "gpu-2", Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To("gpu-2")}}
	require.NoError(t, inf.Resource().V1().ResourceSlices().Informer().GetIndexer().Add(slice))
	submit()
	require.Len(t, f.slurm.submitted, 1)
	assert.Equal(t, []string{"gpu-1"}, f.slurm.submitted[0].ExcludedNodes)
}

// A Node that changes wakes the pods no Slurm node fitted, and those whose
// constrained job Slurm refused (asked again at once, not after
// rejectDelay); a refusal of a job that left nothing out stays.
func TestCoreNodeChangeWakesConstrainedPods(t *testing.T) {
	f := newCoreFixture(t)
	key := ownerOf(f.pod).key()
	f.core.Place(f.pod)
	p := f.core.rec.s.places[key]
	p.err, p.rejected, p.constrained, p.submitting, p.errAt = errors.New("refused"), true, true, false, time.Now()
	f.woken = nil
	a := node("gpu-1", nil)
	b := a.DeepCopy()
	b.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady}}
	f.core.NodeEventHandler().OnUpdate(a, b) // a heartbeat: nothing
	assert.Empty(t, f.woken)
	b.Labels = map[string]string{"zone": "1"}
	f.core.NodeEventHandler().OnUpdate(a, b)
	assert.Equal(t, []string{"p"}, f.woken)
	assert.False(t, p.rejected)
	f.core.Place(f.pod)
	assert.True(t, p.submitting, "asked again at once")

	p.err, p.rejected, p.constrained, p.submitting = errors.New("refused"), true, false, false
	f.woken = nil
	f.core.NodeEventHandler().OnAdd(node("gpu-9", nil), false)
	assert.Empty(t, f.woken)
	assert.True(t, p.rejected)
}

// A job waiting in Slurm's queue when Nodes change is told the nodes it
// leaves out now: a node labelled for the pod is let in, one labelled away
// left out. Nothing is told when nothing changed.
func TestCorePendingJobFollowsNodeChanges(t *testing.T) {
	f := newCoreFixture(t)
	fit, err := NewNodeFit(context.Background(), nil)
	require.NoError(t, err)
	kube := fake.NewSimpleClientset()
	inf := informers.NewSharedInformerFactory(kube, 0)
	idx := inf.Core().V1().Nodes().Informer().GetIndexer()
	gpu1, gpu2 := node("gpu-1", map[string]string{"pool": "a"}), node("gpu-2", map[string]string{"pool": "b"})
	require.NoError(t, idx.Add(gpu1))
	require.NoError(t, idx.Add(gpu2))
	f.core.fitter.nodes, f.core.fitter.fit = inf.Core().V1().Nodes().Lister(), fit
	f.core.fitter.slurmNodes = func(context.Context, []string) (map[string]bool, error) {
		return map[string]bool{"gpu-1": true, "gpu-2": true}, nil
	}
	f.pod.Spec.NodeSelector = map[string]string{"pool": "a"}
	f.core.podChanged(nil, f.pod)
	f.core.Place(f.pod)
	key, _ := f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	f.core.submitQ.Done(key)
	require.Len(t, f.slurm.submitted, 1)
	require.Equal(t, []string{"gpu-2"}, f.slurm.submitted[0].ExcludedNodes)
	p := f.core.rec.s.places[key]
	f.core.book.observe(slurmrest.Job{ID: p.jobID, State: slurmrest.JobState{slurmrest.JobPending}, Comment: f.slurm.submitted[0].Comment})

	relabel := func(old *corev1.Node, pool string) *corev1.Node {
		n := old.DeepCopy()
		n.Labels = map[string]string{"pool": pool}
		require.NoError(t, idx.Update(n))
		f.core.NodeEventHandler().OnUpdate(old, n)
		for f.core.lifeQ.Len() > 0 {
			k, _ := f.core.lifeQ.Get()
			_, err := f.core.life.reconcile(context.Background(), k)
			require.NoError(t, err)
			f.core.lifeQ.Done(k)
		}
		return n
	}
	gpu2 = relabel(gpu2, "a") // gpu-2 joins the pool: nothing left out
	require.Len(t, f.slurm.updated, 1)
	assert.Equal(t, p.jobID, f.slurm.updated[0].id)
	assert.Equal(t, []string{}, *f.slurm.updated[0].u.ExcludedNodes, "an empty list, which clears Slurm's")
	gpu1 = relabel(gpu1, "b") // gpu-1 leaves it
	require.Len(t, f.slurm.updated, 2)
	assert.Equal(t, []string{"gpu-1"}, *f.slurm.updated[1].u.ExcludedNodes)
	relabel(gpu1, "c") // a change that leaves the pod's nodes as they were: nothing told
	assert.Len(t, f.slurm.updated, 2)

	// A running job is not changed.
	f.core.book.observe(slurmrest.Job{ID: p.jobID, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-2", Comment: f.slurm.submitted[0].Comment})
	relabel(gpu2, "b")
	assert.Len(t, f.slurm.updated, 2)
}
