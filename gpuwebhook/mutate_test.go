package gpuwebhook

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/onepool/onepool/keys"
)

func container(name string, gpus int64) corev1.Container {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		Limits:   corev1.ResourceList{},
	}}
	if gpus > 0 {
		c.Resources.Limits[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Resources.Requests[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return c
}

func pod(scheduler string, cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vllm-7d9f-", Namespace: "infer"},
		Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: cs},
	}
}

func TestMutateTurnsGPURequestsIntoTheClaim(t *testing.T) {
	p := pod(keys.SchedulerName, container("server", 2), container("proxy", 0), container("tokenizer", 1))
	changed, err := Mutate(p)
	require.NoError(t, err)
	require.True(t, changed)

	assert.Equal(t, "3", p.Annotations[keys.AnnotationGPUs])
	assert.Equal(t, "server=2,tokenizer=1", p.Annotations[keys.AnnotationGPURequests])
	require.Len(t, p.Spec.ResourceClaims, 1)
	rc := p.Spec.ResourceClaims[0]
	assert.Equal(t, keys.PodClaimGPUs, rc.Name)
	require.NotNil(t, rc.ResourceClaimName)
	assert.Regexp(t, regexp.MustCompile(`^vllm-7d9f-gpus-[a-z0-9]{8}$`), *rc.ResourceClaimName)
	assert.Empty(t, validation.IsDNS1123Subdomain(*rc.ResourceClaimName))

	for _, c := range p.Spec.Containers {
		_, lim := c.Resources.Limits[ResourceGPU]
		_, req := c.Resources.Requests[ResourceGPU]
		assert.False(t, lim || req, "container %s still asks %s", c.Name, ResourceGPU)
		assert.Contains(t, c.Resources.Requests, corev1.ResourceCPU, "other requests stay")
	}
	assert.Equal(t, []corev1.ResourceClaim{{Name: keys.PodClaimGPUs, Request: "server"}}, p.Spec.Containers[0].Resources.Claims)
	assert.Empty(t, p.Spec.Containers[1].Resources.Claims)
	assert.Equal(t, []corev1.ResourceClaim{{Name: keys.PodClaimGPUs, Request: "tokenizer"}}, p.Spec.Containers[2].Resources.Claims)

	// A second pass (webhook reinvocation) changes nothing.
	changed, err = Mutate(p)
	require.NoError(t, err)
	assert.False(t, changed)
}

func TestMutateLeavesOthersAndRefusesWhatSlurmCannotPlace(t *testing.T) {
	withClaim := pod(keys.SchedulerName, container("c", 1))
	withClaim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic"}}
	initGPU := pod(keys.SchedulerName, container("c", 1))
	initGPU.Spec.InitContainers = []corev1.Container{container("warmup", 1)}
	long := pod(keys.SchedulerName, container("c", 1))
	long.GenerateName = ""
	long.Name = "a-very-long-pod-name-that-goes-on-and-on-and-on-until-it.is-63"
	tests := []struct {
		name    string
		pod     *corev1.Pod
		changed bool
		errText string
	}{
		{name: "another scheduler", pod: pod("default-scheduler", container("c", 1))},
		{name: "no GPUs", pod: pod(keys.SchedulerName, container("c", 0))},
		{name: "a claim of its own", pod: withClaim, errText: `resource claim "nic"`},
		{name: "GPUs in an init container", pod: initGPU, errText: `init container "warmup"`},
		{name: "a long name", pod: long, changed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			changed, err := Mutate(tt.pod)
			if tt.errText != "" {
				assert.ErrorIs(t, err, ErrRefused)
				assert.ErrorContains(t, err, tt.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.changed, changed)
			if !changed {
				assert.Equal(t, before, tt.pod)
				return
			}
			name := *tt.pod.Spec.ResourceClaims[0].ResourceClaimName
			assert.Empty(t, validation.IsDNS1123Subdomain(name), name)
			assert.LessOrEqual(t, len(name), 63)
		})
	}
}
