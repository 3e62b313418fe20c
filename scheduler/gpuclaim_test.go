package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// slice publishes devices name → gresIndex for node at generation gen.
func slice(node string, gen int64, devs map[string]int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver: keys.GPUDriverName, NodeName: ptr.To(node),
		Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
	}}
	for name, idx := range devs {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			keys.GPUAttrGresIndex: {IntValue: ptr.To(idx)},
		}})
	}
	return s
}

func gpuClaim(uid, name string, count int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: keys.GPUDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}
}

// inUse allocates devs on node to c and reserves it for a pod.
func inUse(c *resourceapi.ResourceClaim, node string, devs ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: keys.GPUDriverName, Pool: node, Device: d})
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + c.Name, UID: types.UID("pod-" + c.Name)}}
	return c
}

func TestPlanGPUAllocation(t *testing.T) {
	// Device names deliberately not gpu-<index>: the index is the attribute.
	n1 := slice("n1", 2, map[string]int64{"gpu-10": 0, "gpu-11": 1, "gpu-12": 2, "gpu-13": 3})
	stale := slice("n1", 1, map[string]int64{"gpu-0": 0, "gpu-1": 1, "gpu-2": 2, "gpu-3": 3})
	other := slice("n2", 5, map[string]int64{"gpu-0": 0, "gpu-1": 1})
	wrongClass := gpuClaim("c", "c", 2)
	wrongClass.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.nvidia.com"
	tests := []struct {
		name    string
		node    string
		idx     []int
		slices  []*resourceapi.ResourceSlice
		claim   *resourceapi.ResourceClaim
		others  []*resourceapi.ResourceClaim
		want    []string
		errText string
	}{
		{name: "indices to devices by gresIndex", node: "n1", idx: []int{2, 3}, slices: []*resourceapi.ResourceSlice{stale, n1, other}, claim: gpuClaim("c", "c", 2), want: []string{"gpu-12", "gpu-13"}},
		{name: "disjoint claim in use", node: "n1", idx: []int{1}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 1),
			others: []*resourceapi.ResourceClaim{inUse(gpuClaim("a", "a", 1), "n1", "gpu-10")}, want: []string{"gpu-11"}},
		{name: "same device name on another node is no conflict", node: "n1", idx: []int{0}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 1),
			others: []*resourceapi.ResourceClaim{inUse(gpuClaim("a", "a", 1), "n2", "gpu-10")}, want: []string{"gpu-10"}},
		{name: "an allocated claim no pod uses holds nothing", node: "n1", idx: []int{0}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 1),
			others: func() []*resourceapi.ResourceClaim {
				a := inUse(gpuClaim("a", "a", 1), "n1", "gpu-10")
				a.Status.ReservedFor = nil
				return []*resourceapi.ResourceClaim{a}
			}(), want: []string{"gpu-10"}},
		{name: "device held by a claim in use", node: "n1", idx: []int{0, 1}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 2),
			others: []*resourceapi.ResourceClaim{inUse(gpuClaim("a", "a", 1), "n1", "gpu-11")}, errText: "gpu-11 on n1 (GRES index 1) is allocated to claim ns/a"},
		{name: "index without a device", node: "n1", idx: []int{3, 4}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 2), errText: "GRES index 4 on n1, which publishes no device with that index (indices 0,1,2,3)"},
		{name: "no slice for the node", node: "n3", idx: []int{0}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 1), errText: "node n3 publishes no ResourceSlice"},
		{name: "count differs from Slurm's", node: "n1", idx: []int{0}, slices: []*resourceapi.ResourceSlice{n1}, claim: gpuClaim("c", "c", 2), errText: "asks for 2 GPUs, Slurm gave the job 1 on n1 (IDX 0)"},
		{name: "another device class", node: "n1", idx: []int{0, 1}, slices: []*resourceapi.ResourceSlice{n1}, claim: wrongClass, errText: "device class gpu.onepool.dev"},
		{name: "duplicate gresIndex", node: "n1", idx: []int{0}, slices: []*resourceapi.ResourceSlice{slice("n1", 1, map[string]int64{"gpu-0": 0, "gpu-1": 0})}, claim: gpuClaim("c", "c", 1), errText: "GRES index 0 twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := planGPUAllocation(tt.node, tt.idx, "", tt.slices, tt.claim, tt.others)
			if tt.errText != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrGPUClaim)
				assert.Contains(t, err.Error(), tt.errText)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, r := range res {
				assert.Equal(t, keys.GPUDriverName, r.Driver)
				assert.Equal(t, tt.node, r.Pool)
				assert.Equal(t, "gpus", r.Request)
				got = append(got, r.Device)
			}
			assert.Equal(t, tt.want, got)
			assert.True(t, sameAllocation(inUse(gpuClaim("x", "x", 1), tt.node, got...), res))
		})
	}
}

func TestGPUClaimRequest(t *testing.T) {
	claimed := func(ann map[string]string, gpus int64) *corev1.Pod {
		p := podWith(ann, gpus, "", "")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus")}}
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		gpus    int64
		errText string
	}{
		{name: "claim and count", pod: claimed(map[string]string{keys.AnnotationGPUs: "2"}, 0), gpus: 2},
		{name: "plain GPU request", pod: podWith(nil, 3, "", ""), gpus: 3},
		{name: "claim without count", pod: claimed(nil, 0), errText: "needs the annotation"},
		{name: "count without claim", pod: podWith(map[string]string{keys.AnnotationGPUs: "2"}, 0, "", ""), errText: "only for a pod with the resource claim"},
		{name: "both ways", pod: claimed(map[string]string{keys.AnnotationGPUs: "2"}, 2), errText: "asks GPUs twice"},
		{name: "bad count", pod: claimed(map[string]string{keys.AnnotationGPUs: "zero"}, 0), errText: "at least 1"},
		{name: "another claim", pod: func() *corev1.Pod {
			p := podWith(nil, 1, "", "")
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("nic-1")}}
			return p
		}(), errText: `resource claim "nic": onepool allocates only its own GPU claim`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := requestFor(tt.pod, &Args{})
			if tt.errText != "" {
				assert.ErrorContains(t, err, tt.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.gpus, r.GPUs)
		})
	}
}

func TestNewGPUClaim(t *testing.T) {
	pod := podWith(map[string]string{keys.AnnotationGPUs: "3"}, 0, "", "")
	c := newGPUClaim(pod, "onepool-gpus-x1", 3)
	assert.Equal(t, "ns", c.Namespace)
	require.Len(t, c.OwnerReferences, 1)
	assert.Equal(t, pod.UID, c.OwnerReferences[0].UID)
	assert.True(t, *c.OwnerReferences[0].Controller)
	// What onepool makes is what it then accepts to allocate.
	res, err := planGPUAllocation("n1", []int{0, 1, 2}, "", []*resourceapi.ResourceSlice{slice("n1", 1, map[string]int64{"gpu-0": 0, "gpu-1": 1, "gpu-2": 2})}, c, nil)
	require.NoError(t, err)
	assert.Len(t, res, 3)
}

func TestGPUClaimSplitByContainer(t *testing.T) {
	pod := podWith(map[string]string{keys.AnnotationGPUs: "3", keys.AnnotationGPURequests: "server=2,tokenizer=1"}, 0, "", "")
	c := newGPUClaim(pod, "x", 3)
	require.Len(t, c.Spec.Devices.Requests, 2)
	n1 := slice("n1", 1, map[string]int64{"gpu-0": 0, "gpu-1": 1, "gpu-2": 2, "gpu-3": 3, "gpu-4": 4, "gpu-5": 5})
	res, err := planGPUAllocation("n1", []int{5, 1, 3}, "", []*resourceapi.ResourceSlice{n1}, c, nil)
	require.NoError(t, err)
	got := map[string][]string{}
	for _, r := range res {
		got[r.Request] = append(got[r.Request], r.Device)
	}
	assert.Equal(t, map[string][]string{"server": {"gpu-1", "gpu-3"}, "tokenizer": {"gpu-5"}}, got)

	// A split that does not add up (an edited annotation) falls back to one request.
	for _, bad := range []string{"server=2", "server=x,tokenizer=1", "Server=2,tokenizer=1"} {
		pod.Annotations[keys.AnnotationGPURequests] = bad
		c := newGPUClaim(pod, "x", 3)
		require.Len(t, c.Spec.Devices.Requests, 1, bad)
		assert.Equal(t, int64(3), c.Spec.Devices.Requests[0].Exactly.Count)
	}
}

func TestExclusiveModes(t *testing.T) {
	tests := []struct {
		ann, def string
		want     slurmrest.JobSharing
		errText  string
	}{
		{want: slurmrest.SharingDefault},
		{ann: "none", def: "node", want: slurmrest.SharingDefault},
		{ann: "node", want: slurmrest.SharingExclusive},
		{ann: "user", want: slurmrest.SharingUser},
		{def: "user", want: slurmrest.SharingUser},
		{ann: "whole", errText: "want one of none, node, user"},
	}
	for _, tt := range tests {
		t.Run(tt.ann+"/"+tt.def, func(t *testing.T) {
			var ann map[string]string
			if tt.ann != "" {
				ann = map[string]string{keys.AnnotationJobExclusive: tt.ann}
			}
			a := &Args{DefaultExclusive: tt.def}
			r, err := requestFor(podWith(ann, 1, "", ""), a)
			if tt.errText != "" {
				assert.ErrorContains(t, err, tt.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, r.Sharing)
			assert.Equal(t, tt.want, jobFor(owner{Name: "p"}, "", r, 1, a, "").Sharing)
		})
	}
	a := testArgs(t)
	a.DefaultExclusive = "always"
	assert.ErrorContains(t, validateArgs(a), "defaultExclusive")
}
