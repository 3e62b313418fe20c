package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// The plugin's extension points say what the manager decides, in the framework's
// terms: a node set, or a rejection preemption cannot resolve.
func TestPluginExtensionPoints(t *testing.T) {
	f := newCoreFixture(t)
	pl := &Plugin{core: f.core}
	ctx := context.Background()
	assert.Equal(t, "Onepool", pl.Name())
	assert.Nil(t, pl.PreFilterExtensions())

	st := pl.PreEnqueue(ctx, f.pod)
	require.NotNil(t, st, "gated while its first ask to Slurm is in flight")
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "submitting a placeholder job")

	res, st := pl.PreFilter(ctx, nil, f.pod, nil)
	assert.Nil(t, res)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code(), "Slurm preempts, not Kubernetes")

	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	assert.Nil(t, pl.PreEnqueue(ctx, f.pod), "a pod whose job runs enters the queue")
	res, st = pl.PreFilter(ctx, nil, f.pod, nil)
	require.True(t, st.IsSuccess(), "%v", st)
	assert.Equal(t, sets.New("gpu-1"), res.NodeNames, "only the node of the job's Slurm node")

	assert.Equal(t, fwk.Skip, pl.PreBindPreFlight(ctx, nil, f.pod, "gpu-1").Code(), "no GPU claim: nothing to do before the bind")
	assert.Nil(t, pl.PreBind(ctx, nil, f.pod, "gpu-1"), "no GPU claim: PreBind lets the bind go")
	claimed := f.pod.DeepCopy()
	claimed.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus")}}
	assert.Nil(t, pl.PreBindPreFlight(ctx, nil, claimed, "gpu-1"))
	st = pl.PreBind(ctx, nil, claimed, "gpu-1")
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code(), "a claim onepool cannot allocate keeps the pod unbound: %v", st)

	evs, err := pl.EventsToRegister(ctx)
	require.NoError(t, err)
	var res2 []fwk.EventResource
	for _, e := range evs {
		res2 = append(res2, e.Event.Resource)
	}
	assert.ElementsMatch(t, []fwk.EventResource{fwk.Pod, fwk.Pod, fwk.Node, fwk.ResourceSlice}, res2)
}

func annotated(uid string, ann map[string]string, group string) *corev1.Pod {
	p := podWith(ann, 1, "", "")
	p.UID = types.UID("uid-" + uid)
	if group != "" {
		p.Labels = map[string]string{keys.LabelPodGroup: group}
	}
	return p
}

// A rejected pod is queued again by a cluster event only when that event
// can change onepool's answer: its own Slurm settings changed, or its gang
// gained a member.
func TestQueueingHints(t *testing.T) {
	log := klog.Background()
	pod := annotated("a", map[string]string{keys.AnnotationJobQOS: "low"}, "trio")
	for _, tc := range []struct {
		name     string
		hint     func(klog.Logger, *corev1.Pod, any, any) (fwk.QueueingHint, error)
		old, new any
		want     fwk.QueueingHint
	}{
		{"its QOS changed", askChangedHint, pod, annotated("a", map[string]string{keys.AnnotationJobQOS: "high"}, "trio"), fwk.Queue},
		{"its partition was set", askChangedHint, pod, annotated("a", map[string]string{keys.AnnotationJobQOS: "low", keys.AnnotationJobPartition: "gpu"}, "trio"), fwk.Queue},
		{"its time limit changed", askChangedHint, pod, annotated("a", map[string]string{keys.AnnotationJobQOS: "low", keys.AnnotationJobTimeLimit: "2h"}, "trio"), fwk.Queue},
		{"another annotation changed", askChangedHint, pod, annotated("a", map[string]string{keys.AnnotationJobQOS: "low", "note": "x"}, "trio"), fwk.QueueSkip},
		{"another pod's QOS changed", askChangedHint, annotated("b", nil, ""), annotated("b", map[string]string{keys.AnnotationJobQOS: "high"}, ""), fwk.QueueSkip},
		{"not pods", askChangedHint, "x", "y", fwk.QueueSkip},
		{"a member joined its gang", gangGrewHint, nil, annotated("b", nil, "trio"), fwk.Queue},
		{"a pod of another gang", gangGrewHint, nil, annotated("b", nil, "duo"), fwk.QueueSkip},
		{"a pod of no gang", gangGrewHint, nil, annotated("b", nil, ""), fwk.QueueSkip},
		{"itself", gangGrewHint, nil, pod, fwk.QueueSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.hint(log, pod, tc.old, tc.new)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	other := annotated("c", nil, "")
	got, err := gangGrewHint(log, other, nil, annotated("d", nil, ""))
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "a pod of no gang waits for no member")
	elsewhere := annotated("f", nil, "trio")
	elsewhere.Namespace = "elsewhere"
	got, err = gangGrewHint(log, annotated("e", nil, "trio"), nil, elsewhere)
	require.NoError(t, err)
	assert.Equal(t, fwk.QueueSkip, got, "a gang of the same name in another namespace")
}

// The informer handler takes onepool's pods only, and a deletion the
// informer learnt late (DeletedFinalStateUnknown) too.
func TestPodEventHandler(t *testing.T) {
	f := newCoreFixture(t)
	h := f.core.PodEventHandler()
	theirs := podWith(nil, 1, "", "")
	theirs.Name, theirs.UID = "default-scheduled", "u9"
	h.OnAdd(theirs, false)
	f.core.rec.s.mu.Lock()
	_, tracked := f.core.rec.s.pods["u9"]
	f.core.rec.s.mu.Unlock()
	assert.False(t, tracked, "a pod of another scheduler is not onepool's")

	mine := f.pod.DeepCopy()
	mine.Name, mine.UID = "q", "u2"
	h.OnAdd(mine, false)
	f.core.rec.s.mu.Lock()
	_, tracked = f.core.rec.s.pods["u2"]
	f.core.rec.s.mu.Unlock()
	assert.True(t, tracked)

	done := mine.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	h.OnUpdate(mine, done)
	f.core.rec.s.mu.Lock()
	_, tracked = f.core.rec.s.pods["u2"]
	f.core.rec.s.mu.Unlock()
	assert.False(t, tracked, "a finished pod is no member")

	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: f.pod})
	f.core.rec.s.mu.Lock()
	_, tracked = f.core.rec.s.pods[f.pod.UID]
	_, deleted := f.core.rec.s.deleted[f.pod.UID]
	f.core.rec.s.mu.Unlock()
	assert.False(t, tracked)
	assert.True(t, deleted, "a late deletion is remembered, so a late cycle cannot bring the pod back")
	assert.Contains(t, f.core.Place(f.pod).Message, "the pod was deleted")
}

// A changed ask clears what was decided on the old one: the event that
// was sent for it, and Slurm's rejection, so the pod is submitted again.
func TestPodChangedClearsARejectionWhenTheAskChanges(t *testing.T) {
	f := newCoreFixture(t)
	f.slurm.reject = &slurmrest.APIError{Op: "submit job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
		Errors: []slurmrest.SlurmError{{Errno: slurmrest.ErrnoInvalidQOS}}}
	require.NoError(t, f.submitOnce(t))
	require.Contains(t, f.core.Place(f.pod).Message, "Slurm rejected the placeholder job")
	assert.Zero(t, f.core.submitQ.Len(), "not asked again unchanged")

	same := f.pod.DeepCopy()
	same.Labels = map[string]string{"unrelated": "x"}
	f.core.podChanged(f.pod, same)
	f.core.Place(same)
	assert.Zero(t, f.core.submitQ.Len(), "a change that is not of the ask")

	changed := same.DeepCopy()
	changed.Annotations = map[string]string{keys.AnnotationJobQOS: "normal"}
	f.woken = nil
	f.core.podChanged(same, changed)
	// The framework's queue may have taken the update, and run the pod's
	// cycle on the old rejection, before this handler ran: the pod must
	// be woken, or it waits for an unrelated event (or five minutes).
	assert.Equal(t, []string{"p"}, f.woken, "the pod is placed again")
	f.core.Place(changed)
	assert.Equal(t, 1, f.core.submitQ.Len(), "a new QOS is asked of Slurm")
}

// A namespace whose labels change may be covered by another policy: its
// pending pods are placed again; a change of anything else wakes nothing.
func TestNamespaceAndPolicyHandlersWakePendingPods(t *testing.T) {
	f := newCoreFixture(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"team": "a"}}}
	h := f.core.NamespaceEventHandler()
	relabelled := ns.DeepCopy()
	relabelled.Annotations = map[string]string{"note": "x"}
	h.OnUpdate(ns, relabelled)
	assert.Empty(t, f.woken, "annotations do not select policies")
	relabelled.Labels = map[string]string{"team": "b"}
	h.OnUpdate(ns, relabelled)
	assert.Equal(t, []string{"p"}, f.woken)
	h.OnAdd(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, false)
	assert.Equal(t, []string{"p"}, f.woken, "another namespace's pods only")
	h.OnAdd(ns, false)
	assert.Equal(t, []string{"p", "p"}, f.woken)

	f.woken = nil
	f.pod.Spec.NodeName = "gpu-1"
	f.core.podChanged(nil, f.pod)
	f.core.PolicyEventHandler().OnAdd(nil, false)
	assert.Empty(t, f.woken, "a bound pod is not placed again")
}

// The Node informer's transform drops managedFields and leaves the rest
// (and what is not an object, a deletion's tombstone) as it was.
func TestStripManagedFields(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	got, err := stripManagedFields(node)
	require.NoError(t, err)
	assert.Nil(t, got.(*corev1.Node).ManagedFields)
	assert.Equal(t, "b", got.(*corev1.Node).Labels["a"])
	tomb := cache.DeletedFinalStateUnknown{Key: "gpu-1", Obj: node}
	got, err = stripManagedFields(tomb)
	require.NoError(t, err)
	assert.Equal(t, tomb, got)
}
