package tenancy

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/onepool/onepool/keys"
)

// ResourceGPU is the extended resource a pod asks GPUs with.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// AskOf is what a pod's annotations name, for its TenantPolicy to judge,
// with gpus its GPUs per node.
func AskOf(pod *corev1.Pod, gpus int64) Ask {
	a := pod.Annotations
	return Ask{Partition: a[keys.AnnotationJobPartition], QOS: a[keys.AnnotationJobQOS], Account: a[keys.AnnotationJobAccount],
		Exclusive: strings.TrimSpace(a[keys.AnnotationJobExclusive]), GPUs: gpus}
}

// PodGPUs is how many GPUs a pod asks: its nvidia.com/gpu requests, or
// (once the GPU webhook made them onepool's claim) the count it recorded.
// A count that does not parse is 0: the scheduler refuses such a pod.
func PodGPUs(pod *corev1.Pod) int64 {
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if q, ok := req[ResourceGPU]; ok && q.Value() > 0 {
		return q.Value()
	}
	n, err := strconv.ParseInt(strings.TrimSpace(pod.Annotations[keys.AnnotationGPUs]), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
