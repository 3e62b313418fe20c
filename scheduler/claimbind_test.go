package scheduler

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// claimFixture is the core fixture's pod with onepool's GPU claim (2 GPUs,
// claim p-gpus), its job 7 running on gpu-1 with GRES indices 5-6, and
// gpu-1's ResourceSlice.
type claimFixture struct {
	*coreFixture
	t              *testing.T
	slices, claims cache.Indexer
}

func newClaimFixture(t *testing.T, jobState string) *claimFixture {
	t.Helper()
	f := &claimFixture{coreFixture: newCoreFixture(t), t: t,
		slices: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		claims: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
	f.pod.Annotations = map[string]string{keys.AnnotationGPUs: "2"}
	f.pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	f.pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus")}}
	f.core.podChanged(nil, f.pod)
	s := slice("gpu-1", 3, map[string]int64{"gpu-a": 5, "gpu-b": 6, "gpu-c": 7})
	s.Name = "gpu-1-gpus"
	require.NoError(t, f.slices.Add(s))
	f.core.claimer.slices = resourcelisters.NewResourceSliceLister(f.slices)
	f.core.fitter.slices = f.core.claimer.slices
	f.core.claimer.claims = resourcelisters.NewResourceClaimLister(f.claims)
	j := f.job(7, jobState, "gpu-1")
	j.GresDetail = map[string]string{"gpu-1": "gpu:h100:2(IDX:5-6)"}
	f.core.book.observe(j)
	return f
}

func (f *claimFixture) claim(t *testing.T) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := f.kube.ResourceV1().ResourceClaims("ns").Get(context.Background(), "p-gpus", metav1.GetOptions{})
	require.NoError(t, err)
	return c
}

func (f *claimFixture) writes() int {
	n := 0
	for _, a := range f.kube.Actions() {
		if a.GetResource().Resource == "resourceclaims" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

func eventsOf(f *coreFixture) []string {
	var out []string
	ch := f.core.recorder.(*events.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Before the pod is bound, its claim gets exactly the devices of its job's
// GRES indices on the node, reserved for the pod; the node agent checks
// the job id annotation. A second PreBind (a retried bind) writes nothing.
func TestAllocateGPUClaimFromTheJobsGRESIndices(t *testing.T) {
	f := newClaimFixture(t, slurmrest.JobRunning)
	ctx := context.Background()
	require.Equal(t, decision{Node: "gpu-1"}, f.core.Place(f.pod))

	require.NoError(t, f.core.claimer.allocate(ctx, f.pod, "gpu-1"))
	c := f.claim(t)
	require.NotNil(t, c.Status.Allocation, "the claim the pod named is made and allocated")
	var devs []string
	for _, r := range c.Status.Allocation.Devices.Results {
		assert.Equal(t, keys.GPUDriverName, r.Driver)
		assert.Equal(t, "gpu-1", r.Pool)
		devs = append(devs, r.Device)
	}
	assert.Equal(t, []string{"gpu-a", "gpu-b"}, devs, "the devices publishing GRES indices 5 and 6")
	assert.Equal(t, []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u1"}}, c.Status.ReservedFor)
	assert.Contains(t, c.Finalizers, resourceapi.Finalizer)
	assert.Equal(t, "7", c.Annotations[keys.AnnotationJobID])
	assert.Equal(t, []string{"gpu-1"}, c.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values)
	require.Len(t, c.OwnerReferences, 1, "the claim goes with the pod")
	assert.Equal(t, types.UID("u1"), c.OwnerReferences[0].UID)
	evs := eventsOf(f.coreFixture)
	require.NotEmpty(t, evs)
	assert.Contains(t, evs[len(evs)-1], keys.EventGPUsAllocated)
	assert.Contains(t, evs[len(evs)-1], "GRES indices 5,6")

	before := f.writes()
	require.NoError(t, f.core.claimer.allocate(ctx, f.pod, "gpu-1"))
	assert.Equal(t, before, f.writes(), "an allocation already in place is not written again")
}

// Each reason a claim cannot hold what Slurm gave leaves the pod unbound
// with a GPUClaimFailed event naming it.
func TestAllocateGPUClaimRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   string
		prepare func(f *claimFixture)
		want    string
	}{
		{name: "job not running", state: slurmrest.JobPending, want: "the pod's Slurm job is not running"},
		{name: "pod not placed on a node of the job yet", state: slurmrest.JobRunning,
			prepare: func(f *claimFixture) {}, want: "the pod has no node of Slurm job 7 yet"},
		{name: "claim reserved for another pod", state: slurmrest.JobRunning, prepare: func(f *claimFixture) {
			f.place()
			c := gpuClaim("c1", "p-gpus", 2)
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "thief", UID: "u9"}}
			f.create(c)
		}, want: "reserved for another pod (thief)"},
		{name: "claim allocated other devices", state: slurmrest.JobRunning, prepare: func(f *claimFixture) {
			f.place()
			f.create(inUse(gpuClaim("c1", "p-gpus", 2), "gpu-1", "gpu-c", "gpu-a"))
		}, want: "already allocated other devices"},
		{name: "claim asks another count", state: slurmrest.JobRunning, prepare: func(f *claimFixture) {
			f.place()
			f.create(gpuClaim("c1", "p-gpus", 3))
		}, want: "asks for 3 GPUs, Slurm gave the job 2"},
		{name: "a device held by a claim in use", state: slurmrest.JobRunning, prepare: func(f *claimFixture) {
			f.place()
			other := inUse(gpuClaim("c2", "other", 1), "gpu-1", "gpu-b")
			require.NoError(f.t, f.claims.Add(other))
		}, want: "gpu-b on gpu-1 (GRES index 6) is allocated to claim ns/other"},
		{name: "no DRA informers", state: slurmrest.JobRunning, prepare: func(f *claimFixture) {
			f.place()
			f.core.claimer.slices = nil
		}, want: "does not watch ResourceSlices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newClaimFixture(t, tc.state)
			if tc.prepare != nil {
				tc.prepare(f)
			} else {
				f.place()
			}
			err := f.core.claimer.allocate(context.Background(), f.pod, "gpu-1")
			require.ErrorIs(t, err, ErrGPUClaim)
			assert.ErrorContains(t, err, tc.want)
			evs := eventsOf(f.coreFixture)
			require.NotEmpty(t, evs)
			assert.True(t, strings.Contains(evs[len(evs)-1], keys.EventGPUClaimFailed), "event %q", evs[len(evs)-1])
			if c, gerr := f.kube.ResourceV1().ResourceClaims("ns").Get(context.Background(), "p-gpus", metav1.GetOptions{}); gerr == nil {
				assert.Empty(t, c.Annotations[keys.AnnotationJobID], "nothing written on a claim that cannot hold the job's GPUs")
			}
		})
	}
}

// place runs the scheduling cycle that assigns the pod its node of the job.
func (f *claimFixture) place() { f.core.Place(f.pod) }

func (f *claimFixture) create(c *resourceapi.ResourceClaim) {
	_, err := f.kube.ResourceV1().ResourceClaims("ns").Create(context.Background(), c, metav1.CreateOptions{})
	require.NoError(f.t, err)
}

func TestGPUClaimName(t *testing.T) {
	for _, tc := range []struct {
		name     string
		claims   []corev1.PodResourceClaim
		statuses []corev1.PodResourceClaimStatus
		want     string
		ok       bool
		err      string
	}{
		{name: "no claims"},
		{name: "another claim only", claims: []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("nic-1")}}},
		{name: "named claim", claims: []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("mine")}}, want: "mine", ok: true},
		{name: "from a template, made", claims: []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimTemplateName: ptr.To("tpl")}},
			statuses: []corev1.PodResourceClaimStatus{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus-x7")}}, want: "p-gpus-x7", ok: true},
		{name: "from a template, not made yet", claims: []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimTemplateName: ptr.To("tpl")}},
			ok: true, err: `the claim from template "tpl" is not created yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := podWith(nil, 0, "", "")
			p.Spec.ResourceClaims, p.Status.ResourceClaimStatuses = tc.claims, tc.statuses
			got, ok, err := gpuClaimName(p)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.ok, ok)
			if tc.err != "" {
				assert.ErrorIs(t, err, ErrGPUClaim)
				assert.ErrorContains(t, err, tc.err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
