package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func member(name, uid, group string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}, Status: corev1.PodStatus{Phase: phase}}
	if group != "" {
		p.Labels = map[string]string{keys.LabelPodGroup: group}
	}
	return p
}

// A job is cancelled only once the API server itself says its pods are
// gone: deleted, replaced by a pod of the same name, or finished.
func TestConfirmGone(t *testing.T) {
	pod := owner{Namespace: "ns", Name: "p", UID: "u1"}
	gang := owner{Kind: kindPodGroup, Namespace: "ns", Name: "trio"}
	for _, tc := range []struct {
		name  string
		o     owner
		pods  []runtime.Object
		fail  bool
		gone  bool
		error bool
	}{
		{name: "deleted", o: pod, gone: true},
		{name: "replaced by another of its name", o: pod, pods: []runtime.Object{member("p", "u2", "", corev1.PodRunning)}, gone: true},
		{name: "succeeded", o: pod, pods: []runtime.Object{member("p", "u1", "", corev1.PodSucceeded)}, gone: true},
		{name: "failed", o: pod, pods: []runtime.Object{member("p", "u1", "", corev1.PodFailed)}, gone: true},
		{name: "running", o: pod, pods: []runtime.Object{member("p", "u1", "", corev1.PodRunning)}},
		{name: "pending", o: pod, pods: []runtime.Object{member("p", "u1", "", corev1.PodPending)}},
		{name: "the API server fails", o: pod, pods: []runtime.Object{member("p", "u1", "", corev1.PodRunning)}, fail: true, error: true},
		{name: "gang without pods", o: gang, gone: true},
		{name: "gang all finished", o: gang, gone: true, pods: []runtime.Object{
			member("trio-0", "a", "trio", corev1.PodSucceeded), member("trio-1", "b", "trio", corev1.PodFailed)}},
		{name: "gang with one left", o: gang, pods: []runtime.Object{
			member("trio-0", "a", "trio", corev1.PodSucceeded), member("trio-1", "b", "trio", corev1.PodRunning)}},
		{name: "another gang's pod does not count", o: gang, gone: true, pods: []runtime.Object{member("duo-0", "c", "duo", corev1.PodRunning)}},
		{name: "gang, the API server fails", o: gang, fail: true, error: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewSimpleClientset(tc.pods...)
			if tc.fail {
				kube.PrependReactor("*", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd")
				})
			}
			gone, err := podsGone(context.Background(), kube, tc.o, func(types.UID) bool { return true })
			assert.Equal(t, tc.error, err != nil, "err %v", err)
			assert.Equal(t, tc.gone, gone)
		})
	}
}

// An eviction carries the pod's uid (a new pod of the same name is never
// evicted for the old one's job) and the grace; a pod already gone or
// replaced is not an error.
func TestEvict(t *testing.T) {
	pod := member("p", "u1", "", corev1.PodRunning)
	for _, tc := range []struct {
		name   string
		answer error
		err    bool
	}{
		{name: "evicted"},
		{name: "gone already", answer: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")},
		{name: "replaced (uid precondition)", answer: apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("uid"))},
		{name: "budget refuses", answer: apierrors.NewTooManyRequests("budget", 10), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewSimpleClientset(pod)
			var got *policyv1.Eviction
			kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				got = a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
				return true, nil, tc.answer
			})
			err := evict(context.Background(), kube.CoreV1().Pods("ns"), pod, ptr.To[int64](12))
			assert.Equal(t, tc.err, err != nil, "err %v", err)
			require.NotNil(t, got)
			assert.Equal(t, "p", got.Name)
			assert.Equal(t, types.UID("u1"), *got.DeleteOptions.Preconditions.UID)
			assert.Equal(t, int64(12), *got.DeleteOptions.GracePeriodSeconds)
		})
	}
}

func TestAnnotateJobID(t *testing.T) {
	pod := member("p", "u1", "", corev1.PodPending)
	kube := fake.NewSimpleClientset(pod)
	require.NoError(t, annotateJobID(context.Background(), kube.CoreV1().Pods("ns"), pod, 4242))
	got, err := kube.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "4242", got.Annotations[keys.AnnotationJobID])
	gone := member("q", "u2", "", corev1.PodPending)
	assert.NoError(t, annotateJobID(context.Background(), kube.CoreV1().Pods("ns"), gone, 1), "a pod deleted meanwhile is not an error")
	kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd")
	})
	assert.Error(t, annotateJobID(context.Background(), kube.CoreV1().Pods("ns"), pod, 1))
}

// The job id is written once on each live member: not again on a pod that
// carries it, never on a pod being deleted.
func TestRecordJobIDSkipsWhatNeedsNoWrite(t *testing.T) {
	f := newCoreFixture(t)
	carries := f.pod.DeepCopy()
	carries.Annotations = map[string]string{keys.AnnotationJobID: "7"}
	leaving := f.pod.DeepCopy()
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	f.kube.ClearActions()
	require.NoError(t, f.core.life.recordJobID(context.Background(), []*corev1.Pod{carries, leaving}, 7))
	assert.Empty(t, f.kube.Actions())
	require.NoError(t, f.core.life.recordJobID(context.Background(), []*corev1.Pod{f.pod}, 7))
	require.Len(t, f.kube.Actions(), 1)
	assert.Equal(t, "patch", f.kube.Actions()[0].GetVerb())
}

// A submitted job the cache never lists is given time; then Slurm itself
// is asked, and only a job Slurm denies is missing, its pods evicted.
func TestReconcileASubmittedJobNeverListed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		age        time.Duration
		slurmHasIt bool
		after      time.Duration
		evicted    bool
	}{
		{name: "just submitted", age: time.Second, after: 2 * time.Second},
		{name: "long ago, Slurm denies it", age: 11 * time.Second, evicted: true, after: 5 * time.Second},
		{name: "long ago, Slurm has it", age: 11 * time.Second, slurmHasIt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCoreFixture(t)
			require.NoError(t, f.submitOnce(t)) // job 101
			key := ownerOf(f.pod).key()
			f.core.rec.s.mu.Lock()
			f.core.rec.s.places[key].submitted = time.Now().Add(-tc.age)
			f.core.rec.s.mu.Unlock()
			if tc.slurmHasIt {
				j := f.job(101, slurmrest.JobPending, "")
				f.slurm.jobs = map[uint32]*slurmrest.Job{101: &j}
			}
			after, err := f.core.life.reconcile(context.Background(), key)
			require.NoError(t, err)
			assert.Equal(t, tc.after, after)
			assert.Equal(t, tc.evicted, f.evicted())
			if tc.evicted {
				assert.True(t, slicesContainsPrefix(eventsOf(f), "Warning "+keys.EventJobMissing), "events %v", eventsOf(f))
				assert.Contains(t, f.core.Place(f.pod).Message, "Slurm job 101 no longer exists")
			}
			if tc.slurmHasIt {
				assert.Contains(t, f.core.Place(f.pod).Message, "job 101 is PENDING", "Slurm's answer is taken")
			}
		})
	}
}

func slicesContainsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// A duplicate Slurm does not let onepool cancel stays on the list and the
// reconcile fails (it is retried); one Slurm no longer knows is done.
func TestReconcileCancelsDuplicatesUntilSlurmTakesTheCancel(t *testing.T) {
	f := newCoreFixture(t)
	key := ownerOf(f.pod).key()
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	f.core.book.observe(f.job(9, slurmrest.JobPending, ""))
	failing := &failingCancel{fakeSlurm: f.slurm, err: &slurmrest.APIError{Kind: slurmrest.ErrUnreachable}}
	f.core.life.slurm = failing
	_, err := f.core.life.reconcile(context.Background(), key)
	require.Error(t, err)
	assert.Equal(t, []uint32{9}, f.core.rec.s.places[key].extra, "kept to cancel again")

	failing.err = &slurmrest.APIError{Kind: slurmrest.ErrNotFound}
	_, err = f.core.life.reconcile(context.Background(), key)
	require.NoError(t, err)
	assert.Empty(t, f.core.rec.s.places[key].extra)
	assert.Equal(t, uint32(7), f.core.rec.s.places[key].jobID)
}

type failingCancel struct {
	*fakeSlurm
	err error
}

func (f *failingCancel) CancelJob(context.Context, uint32) error { return f.err }

// The pods of a PodGroup read from the API: its uid and how many pods
// one job places.
func TestDynamicGroups(t *testing.T) {
	obj := func(apiVersion, kind, name string, path []string, size any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": "ns", "uid": kind + "-" + name},
		}}
		if size != nil {
			require.NoError(t, unstructured.SetNestedField(u.Object, size, path...))
		}
		return u
	}
	pg := func(name string, size any) *unstructured.Unstructured {
		return obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", name, []string{"spec", "minMember"}, size)
	}
	lws := func(name string, size any) *unstructured.Unstructured {
		return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, []string{"spec", "leaderWorkerTemplate", "size"}, size)
	}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{PodGroupGVR: "PodGroupList", LeaderWorkerSetGVR: "LeaderWorkerSetList"},
		pg("trio", int64(3)), pg("none", nil), pg("zero", int64(0)), pg("huge", int64(5000)), pg("text", "3"),
		lws("vllm", int64(2)), lws("none", nil), lws("zero", int64(0)), lws("huge", int64(5000)), lws("text", "3"),
		withLWS(lws("ready", int64(2)), func(u *unstructured.Unstructured) {
			require.NoError(t, unstructured.SetNestedField(u.Object, "LeaderReady", "spec", "startupPolicy"))
		}),
		withLWS(lws("exclusive", int64(2)), func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"})
		}))
	g := DynamicGroups{Client: dyn}
	got, err := g.PodGroup(context.Background(), "ns", "trio")
	require.NoError(t, err)
	assert.Equal(t, Group{UID: "PodGroup-trio", MinMember: 3}, got)
	got, err = g.LeaderWorkerSet(context.Background(), "ns", "vllm")
	require.NoError(t, err)
	assert.Equal(t, Group{UID: "LeaderWorkerSet-vllm", MinMember: 2}, got)
	for _, name := range []string{"none", "zero", "huge", "text"} {
		_, err := g.PodGroup(context.Background(), "ns", name)
		assert.ErrorContains(t, err, fmt.Sprintf("PodGroup ns/%s: spec.minMember must be 1 to 4096", name))
		_, err = g.LeaderWorkerSet(context.Background(), "ns", name)
		assert.ErrorContains(t, err, fmt.Sprintf("LeaderWorkerSet ns/%s: spec.leaderWorkerTemplate.size must be 1 to 4096", name))
	}
	_, err = g.PodGroup(context.Background(), "ns", "missing")
	assert.True(t, apierrors.IsNotFound(err), "a PodGroup that does not exist: %v", err)
	assert.ErrorContains(t, err, "PodGroup ns/missing")
	_, err = g.LeaderWorkerSet(context.Background(), "ns", "ready")
	assert.ErrorContains(t, err, "LeaderWorkerSet ns/ready: startupPolicy LeaderReady makes its workers only once the leader is Ready")
	_, err = g.LeaderWorkerSet(context.Background(), "ns", "exclusive")
	assert.ErrorContains(t, err, "LeaderWorkerSet ns/exclusive: leaderworkerset.sigs.k8s.io/exclusive-topology makes its workers only once the leader is placed")
	_, err = g.LeaderWorkerSet(context.Background(), "ns", "missing")
	assert.True(t, apierrors.IsNotFound(err), "a LeaderWorkerSet that does not exist: %v", err)
}

func withLWS(u *unstructured.Unstructured, change func(*unstructured.Unstructured)) *unstructured.Unstructured {
	change(u)
	return u
}

// A JobSet replicated job's gang is its replicas × parallelism; one that
// runs in waves or asks for exclusive placement is refused with the reason.
func TestJobSetGang(t *testing.T) {
	js := func(rj map[string]any, annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
			"metadata": map[string]any{"name": "train", "namespace": "ns"},
			"spec":     map[string]any{"replicatedJobs": []any{map[string]any{"name": "driver"}, rj}},
		}}
		u.SetAnnotations(annotations)
		return u
	}
	workers := func(replicas, parallelism, completions any) map[string]any {
		spec := map[string]any{}
		if parallelism != nil {
			spec["parallelism"] = parallelism
		}
		if completions != nil {
			spec["completions"] = completions
		}
		rj := map[string]any{"name": "workers", "template": map[string]any{"spec": spec}}
		if replicas != nil {
			rj["replicas"] = replicas
		}
		return rj
	}
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		want int
		err  string
	}{
		{"replicas of one pod", js(workers(int64(4), nil, nil), nil), 4, ""},
		{"replicas × parallelism", js(workers(int64(2), int64(3), int64(3)), nil), 6, ""},
		{"all defaults", js(workers(nil, nil, nil), nil), 1, ""},
		{"waves", js(workers(int64(1), int64(2), int64(4)), nil), 0, "replicated job workers: its Jobs run 4 pods in waves of 2"},
		{"exclusive placement", js(workers(int64(2), nil, nil), map[string]string{jobSetExclusiveTopology: "rack"}), 0, "alpha.jobset.sigs.k8s.io/exclusive-topology places a Job's leader pod before its others"},
		{"too big", js(workers(int64(5000), nil, nil), nil), 0, "replicas × parallelism must be 1 to 4096"},
		{"zero", js(workers(int64(0), nil, nil), nil), 0, "replicas × parallelism must be 1 to 4096"},
		{"not a number", js(workers("2", nil, nil), nil), 0, "replicated job workers: replicas"},
		{"no such replicated job", js(map[string]any{"name": "other"}, nil), 0, "no replicated job workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := jobSetGang(tc.u, "workers")
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, n)
		})
	}
}
