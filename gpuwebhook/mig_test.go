package gpuwebhook

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/onepool/onepool/keys"
)

// migContainer asks n MIG devices of profile, as NVIDIA's device plugin
// names them.
func migContainer(name, profile string, n int64) corev1.Container {
	c := container(name, 0)
	r := corev1.ResourceName(ResourceMIGPrefix + profile)
	c.Resources.Limits[r] = *resource.NewQuantity(n, resource.DecimalSI)
	c.Resources.Requests[r] = *resource.NewQuantity(n, resource.DecimalSI)
	return c
}

func TestMutateMIGProfile(t *testing.T) {
	p := pod(keys.SchedulerName, migContainer("server", "1g.10gb", 1), container("proxy", 0), migContainer("side", "1g.10gb", 2))
	changed, err := Mutate(p)
	require.NoError(t, err)
	require.True(t, changed)
	assert.Equal(t, "3", p.Annotations[keys.AnnotationGPUs])
	assert.Equal(t, "server=1,side=2", p.Annotations[keys.AnnotationGPURequests])
	assert.Equal(t, "1g.10gb", p.Annotations[keys.AnnotationGPUType])
	for _, c := range p.Spec.Containers {
		for name := range c.Resources.Limits {
			assert.NotContains(t, string(name), "nvidia.com/", c.Name)
		}
	}
	assert.Equal(t, []corev1.ResourceClaim{{Name: keys.PodClaimGPUs, Request: "server"}}, p.Spec.Containers[0].Resources.Claims)

	// +me profiles become Slurm-safe types; whole GPUs carry no type.
	me := pod(keys.SchedulerName, migContainer("c", "1g.18gb+me", 1))
	_, err = Mutate(me)
	require.NoError(t, err)
	assert.Equal(t, "1g.18gb_me", me.Annotations[keys.AnnotationGPUType])
	whole := pod(keys.SchedulerName, container("c", 1))
	whole.Annotations = map[string]string{keys.AnnotationGPUType: "3g.40gb"} // the author's, not the webhook's
	_, err = Mutate(whole)
	require.NoError(t, err)
	assert.NotContains(t, whole.Annotations, keys.AnnotationGPUType)
}

func TestMutateRefusesMixedGPUKinds(t *testing.T) {
	both := migContainer("c", "1g.10gb", 1)
	both.Resources.Limits[ResourceGPU] = *resource.NewQuantity(1, resource.DecimalSI)
	initMIG := pod(keys.SchedulerName, container("c", 1))
	initMIG.Spec.InitContainers = []corev1.Container{migContainer("warmup", "1g.10gb", 1)}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"two profiles":             {pod(keys.SchedulerName, migContainer("a", "1g.10gb", 1), migContainer("b", "2g.20gb", 1)), "one pod's GPUs are one kind"},
		"a GPU and a MIG device":   {pod(keys.SchedulerName, container("a", 1), migContainer("b", "1g.10gb", 1)), "one pod's GPUs are one kind"},
		"both in one container":    {pod(keys.SchedulerName, both), "one kind of GPU per container"},
		"not a profile":            {pod(keys.SchedulerName, migContainer("a", "1g.10gb,gpu:8", 1)), "is not a MIG profile"},
		"MIG in an init container": {initMIG, `init container "warmup"`},
	} {
		before := tc.pod.DeepCopy()
		_, err := Mutate(tc.pod)
		assert.ErrorIs(t, err, ErrRefused, name)
		assert.ErrorContains(t, err, tc.want, name)
		assert.Equal(t, before, tc.pod, "%s: a refused pod is not changed", name)
	}
}
