package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/internal/fakeslurm"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// staleEnv is a syncer whose client can be made to read an old copy of the
// Node, as an informer behind onepool's own write does.
type staleEnv struct {
	t        *testing.T
	c        client.Client
	slurm    *fakeslurm.Slurm
	r        *PodReconciler
	recorder *events.FakeRecorder
	oldNode  *corev1.Node // read instead of the Node while set
	req      ctrl.Request
}

func newStaleEnv(t *testing.T) *staleEnv {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	owner := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "slurmd", Namespace: "slurm", UID: "nodeset-uid"}}
	ref := *metav1.NewControllerRef(owner, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{keys.LabelSlurmNodeName: "gpu-0"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-gpu-0", Namespace: "slurm", Labels: SlurmdPodSelector(), OwnerReferences: []metav1.OwnerReference{ref}},
		Spec:       corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{Name: "slurmd", Image: "x"}}},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	e := &staleEnv{t: t, slurm: fakeslurm.New("gpu-0"), recorder: events.NewFakeRecorder(100),
		req: ctrl.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}}
	e.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(owner, node, pod).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if n, ok := obj.(*corev1.Node); ok && e.oldNode != nil && key.Name == e.oldNode.Name {
				e.oldNode.DeepCopyInto(n)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	opts := Options{}
	opts.Default()
	e.r = &PodReconciler{client: e.c, slurm: e.slurm, recorder: e.recorder, opts: opts, metrics: m, log: log.Log,
		lag: map[types.NamespacedName]time.Time{}, wrote: map[string]time.Time{}, recorded: map[string]recordWrite{}}
	return e
}

func (e *staleEnv) reconcile() {
	e.t.Helper()
	_, err := e.r.Reconcile(context.Background(), e.req)
	require.NoError(e.t, err)
}

func (e *staleEnv) node() *corev1.Node {
	e.t.Helper()
	n := &corev1.Node{}
	require.NoError(e.t, e.c.Get(context.Background(), types.NamespacedName{Name: "gpu-0"}, n))
	return n
}

func (e *staleEnv) cordon(words string) {
	e.t.Helper()
	n := e.node()
	n.Spec.Unschedulable = true
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[keys.AnnotationCordonReason] = words
	require.NoError(e.t, e.c.Update(context.Background(), n))
}

// A cached Node older than onepool's own record write decides nothing: the
// syncer does not take its own new drain for an admin's and drop its
// record (CI, 2026-11-26: the Node was then never resumed by onepool).
func TestStaleNodeCacheKeepsOnepoolsDrain(t *testing.T) {
	e := newStaleEnv(t)
	first, _ := drain.CordonReason("PSU swap")
	second, _ := drain.CordonReason("PSU and fan swap")

	e.cordon("PSU swap")
	e.reconcile()
	require.Equal(t, first, e.slurm.Get("gpu-0").Reason)
	before := e.node() // what an informer behind the next write still holds

	e.cordon("PSU and fan swap")
	e.reconcile()
	require.Equal(t, second, e.slurm.Get("gpu-0").Reason)
	a := e.node().Annotations
	require.Equal(t, second, a[keys.AnnotationDrainApplied])

	// The cache still shows the Node from before the new words and their
	// record; Slurm already shows the new drain.
	before.Annotations[keys.AnnotationCordonReason] = "PSU and fan swap"
	e.oldNode = before
	e.reconcile()
	e.oldNode = nil
	e.reconcile()

	a = e.node().Annotations
	assert.Equal(t, second, a[keys.AnnotationDrainApplied], "onepool's record of its drain")
	assert.Equal(t, first, drain.Parse(a[keys.AnnotationDrainReplaced]).Reason)
	assert.Empty(t, a[keys.AnnotationSlurmReason], "onepool's own drain mirrored as an admin's")
	assert.Equal(t, second, e.slurm.Get("gpu-0").Reason)

	// And uncordoned, onepool resumes its drain.
	n := e.node()
	n.Spec.Unschedulable = false
	delete(n.Annotations, keys.AnnotationCordonReason)
	require.NoError(t, e.c.Update(context.Background(), n))
	e.reconcile()
	assert.False(t, e.slurm.Get("gpu-0").State.Drain(), "onepool's drain resumed")
	for len(e.recorder.Events) > 0 {
		assert.NotContains(t, <-e.recorder.Events, keys.EventAdminDrainKept)
	}
}
