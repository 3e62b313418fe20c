package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
)

// A pod asking a MIG profile (through the webhook's claim and type
// annotation, or nvidia.com/mig-<profile> itself) asks Slurm that GRES
// type: gres/gpu:<profile>:<n>.
func TestMIGRequestAsksTheProfile(t *testing.T) {
	claimed := func(ann map[string]string) *corev1.Pod {
		p := podWith(ann, 0, "", "")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: ptr.To("p-gpus")}}
		return p
	}
	raw := func(profile string, n int64, withGPU int64) *corev1.Pod {
		p := podWith(nil, withGPU, "", "")
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(ResourceMIGPrefix+profile)] = *resource.NewQuantity(n, resource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceName(ResourceMIGPrefix+profile)] = *resource.NewQuantity(n, resource.DecimalSI)
		return p
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		tres    string
		errText string
	}{
		{name: "the webhook's claim", pod: claimed(map[string]string{keys.AnnotationGPUs: "2", keys.AnnotationGPUType: "1g.10gb"}), tres: "gres/gpu:1g.10gb:2"},
		{name: "a whole GPU claim", pod: claimed(map[string]string{keys.AnnotationGPUs: "1"}), tres: "gres/gpu:1"},
		{name: "nvidia.com/mig-*", pod: raw("2g.20gb", 1, 0), tres: "gres/gpu:2g.20gb:1"},
		{name: "a +me profile", pod: raw("1g.18gb+me", 1, 0), tres: "gres/gpu:1g.18gb_me:1"},
		{name: "beside nvidia.com/gpu", pod: raw("2g.20gb", 1, 1), errText: "one pod's GPUs are one kind"},
		{name: "not a profile", pod: raw("1g.10gb,gpu:8", 1, 0), errText: "is not a MIG profile"},
		{name: "a forged type", pod: claimed(map[string]string{keys.AnnotationGPUs: "1", keys.AnnotationGPUType: "1g.10gb:8,gres/gpu"}), errText: "not a GRES type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := requestFor(tc.pod, &Args{})
			if tc.errText != "" {
				assert.ErrorContains(t, err, tc.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.tres, jobFor(owner{Name: "p"}, "", r, 1, &Args{}, "").TresPerNode)
		})
	}
}

// migSlice is a node publishing issue 41's MIG devices by GRES index.
func migSlice(node string) *resourceapi.ResourceSlice {
	s := slice(node, 1, nil)
	for i, d := range []struct{ name, gresType string }{
		{"gpu-0-mig-9-0", "1g.10gb"}, {"gpu-0-mig-10-0", "1g.10gb"}, {"gpu-0-mig-5-0", "2g.20gb"}, {"gpu-0-mig-1-0", "3g.40gb"}, {"gpu-1", "nvidia_h100_80gb_hbm3"},
	} {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d.name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			keys.GPUAttrGresIndex: {IntValue: ptr.To(int64(i))},
			keys.GPUAttrGresType:  {StringValue: ptr.To(d.gresType)},
		}})
	}
	return s
}

func TestMIGClaimFromSlurmsIndex(t *testing.T) {
	pod := podWith(map[string]string{keys.AnnotationGPUs: "1", keys.AnnotationGPUType: "1g.10gb"}, 0, "", "")
	c := newGPUClaim(pod, "x", 1)
	require.Len(t, c.Spec.Devices.Requests, 1)
	require.Len(t, c.Spec.Devices.Requests[0].Exactly.Selectors, 1)
	assert.Equal(t, `device.attributes["gpu.onepool.dev"]["type"] == "1g.10gb"`, c.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression)

	rs := []*resourceapi.ResourceSlice{migSlice("n1")}
	res, err := planGPUAllocation("n1", []int{1}, "1g.10gb", rs, c, nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, "gpu-0-mig-10-0", res[0].Device)

	// Slurm's index names a device of another type: not bound.
	_, err = planGPUAllocation("n1", []int{2}, "1g.10gb", rs, c, nil)
	assert.ErrorIs(t, err, ErrGPUClaim)
	assert.ErrorContains(t, err, `gpu-0-mig-5-0 of type "2g.20gb"; the pod asks "1g.10gb"`)

	// Another claim in use holds that MIG device: not given twice.
	other := inUse(gpuClaim("uid-o", "o", 1), "n1", "gpu-0-mig-10-0")
	_, err = planGPUAllocation("n1", []int{1}, "1g.10gb", rs, c, []*resourceapi.ResourceClaim{other})
	assert.ErrorIs(t, err, ErrGPUClaim)
	assert.ErrorContains(t, err, "in use")
}
