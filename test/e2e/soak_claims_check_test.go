package e2e

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
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// The soak's claim check can fail: a claim holding devices other than its
// job's GRES indices, and one device in two live pods' claims, are
// problems; the right allocation is counted as checked. (No lab: the
// objects are given to a fake clientset.)
func TestSoakClaimCheckFindsWrongDevices(t *testing.T) {
	const node = "dyn-0"
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dyn-0-gpu"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: keys.GPUDriverName, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node}}}
	for i := range 4 {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: "gpu-" + string(rune('a'+i)),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{keys.GPUAttrGresIndex: {IntValue: ptr.To(int64(i))}}})
	}
	s := &soak{ns: "soak-x", claimsChecked: map[types.UID]bool{}}
	pod := func(name, job string) (*corev1.Pod, *resourceapi.ResourceClaim) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.claimsNS(), UID: types.UID("uid-" + name),
			Annotations: map[string]string{keys.AnnotationJobID: job}},
			Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To(name + "-gpus")}}}}
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus", Namespace: s.claimsNS()}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: p.UID}}
		return p, c
	}
	allocate := func(c *resourceapi.ResourceClaim, devs ...string) {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, d := range devs {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: keys.GPUDriverName, Pool: node, Device: d})
		}
	}
	job := func(id uint32, idx string) slurmrest.Job {
		return slurmrest.Job{ID: id, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: node, GresDetail: map[string]string{node: "gpu:h100:2(IDX:" + idx + ")"}}
	}
	v := slurmView{jobs: []slurmrest.Job{job(10, "0-1"), job(11, "2-3"), job(12, "2-3")}}

	right, rightClaim := pod("right", "10")
	allocate(rightClaim, "gpu-a", "gpu-b")
	wrong, wrongClaim := pod("wrong", "11")
	allocate(wrongClaim, "gpu-a", "gpu-b") // its job has 2-3; gpu-a is right's too
	s.kc = fake.NewClientset(slice, right, rightClaim, wrong, wrongClaim)

	problems := strings.Join(s.claimProblems(context.Background(), v, []corev1.Pod{*right, *wrong}), "\n")
	assert.Contains(t, problems, "claim wrong-gpus holds GRES indices [0 1], job 11 has [2 3]")
	assert.Contains(t, problems, "GPU dyn-0/gpu-a in the claims of pods right and wrong")
	assert.Equal(t, map[types.UID]bool{right.UID: true}, s.claimsChecked, "only the right pod counts as checked")

	allocate(wrongClaim, "gpu-c", "gpu-d")
	s.kc = fake.NewClientset(slice, right, rightClaim, wrong, wrongClaim)
	require.Empty(t, s.claimProblems(context.Background(), v, []corev1.Pod{*right, *wrong}))
	assert.Len(t, s.claimsChecked, 2)

	unallocated, c := pod("unallocated", "12")
	s.kc = fake.NewClientset(slice, unallocated, c)
	assert.Equal(t, []string{`claim pod unallocated on dyn-0: claim "unallocated-gpus" not allocated`},
		s.claimProblems(context.Background(), v, []corev1.Pod{*unallocated}))
}
