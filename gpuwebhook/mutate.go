// Package gpuwebhook is the mutating admission webhook that lets a pod keep
// asking GPUs as nvidia.com/gpu: N while Slurm allocates them: it turns the
// request of a schedulerName: onepool pod into onepool's GPU claim, which
// the scheduler allocates from the GPUs Slurm gave the pod's job.
package gpuwebhook

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

// ResourceGPU is the extended resource pods ask GPUs with;
// ResourceMIGPrefix + a MIG profile (nvidia.com/mig-1g.10gb) asks MIG
// devices of that profile, as NVIDIA's device plugin names them.
const (
	ResourceGPU       corev1.ResourceName = "nvidia.com/gpu"
	ResourceMIGPrefix string              = "nvidia.com/mig-"
)

// ErrRefused means the pod cannot be placed through Slurm as it asks; the
// message says why and is shown to whoever created the pod.
var ErrRefused = errors.New("onepool cannot place this pod")

// Mutate turns the nvidia.com/gpu requests of a onepool pod into one claim
// (keys.PodClaimGPUs) with one request per GPU container (named after the
// container, so each container gets its own GPUs, as with a device
// plugin), records the count in keys.AnnotationGPUs, and names the claim
// for the scheduler to make (the pod's name may not exist yet). It
// reports whether it changed the pod; pods of other schedulers, pods
// without GPUs and pods already converted are left as they are.
func Mutate(pod *corev1.Pod) (bool, error) {
	if pod.Spec.SchedulerName != keys.SchedulerName {
		return false, nil
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name != keys.PodClaimGPUs {
			return false, fmt.Errorf("%w: resource claim %q: under schedulerName %s only onepool's own GPU claim is allocated (Slurm places the pod; ask GPUs as %s)", ErrRefused, rc.Name, keys.SchedulerName, ResourceGPU)
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return false, nil // converted already (a reinvocation)
	}
	for _, c := range pod.Spec.InitContainers {
		if a, err := gpus(c); err != nil || a.n > 0 {
			return false, fmt.Errorf("%w: init container %q asks %s: Slurm allocates GPUs to the pod's containers only", ErrRefused, c.Name, a.resource)
		}
	}
	var total int64
	var split []string
	var ask gpuAsk // the pod's one kind of GPU
	asks := make([]gpuAsk, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		a, err := gpus(c)
		if err != nil {
			return false, fmt.Errorf("%w: container %q: %w", ErrRefused, c.Name, err)
		}
		if a.n <= 0 {
			continue
		}
		if ask.n > 0 && a.resource != ask.resource {
			return false, fmt.Errorf("%w: containers ask %s and %s: one pod's GPUs are one kind (its Slurm job asks one GRES type)", ErrRefused, ask.resource, a.resource)
		}
		ask, asks[i] = a, a
	}
	for i := range pod.Spec.Containers {
		c, a := &pod.Spec.Containers[i], asks[i]
		if a.n <= 0 {
			continue
		}
		total += a.n
		split = append(split, c.Name+"="+strconv.FormatInt(a.n, 10))
		delete(c.Resources.Requests, a.resource)
		delete(c.Resources.Limits, a.resource)
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: keys.PodClaimGPUs, Request: c.Name})
	}
	if total == 0 {
		return false, nil
	}
	name, err := claimName(pod)
	if err != nil {
		return false, err
	}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: keys.PodClaimGPUs, ResourceClaimName: &name})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[keys.AnnotationGPUs] = strconv.FormatInt(total, 10)
	pod.Annotations[keys.AnnotationGPURequests] = strings.Join(split, ",")
	// The type is the webhook's to write, as the count is: a pod asking
	// nvidia.com/gpu asks any GPU, whatever its author annotated.
	if ask.gresType != "" {
		pod.Annotations[keys.AnnotationGPUType] = ask.gresType
	} else {
		delete(pod.Annotations, keys.AnnotationGPUType)
	}
	return true, nil
}

// gpuAsk is what one container asks: n GPUs of resource, which is
// ResourceGPU (any type) or a MIG profile's (gresType its GRES type).
type gpuAsk struct {
	resource corev1.ResourceName
	gresType string
	n        int64
}

// gpus is a container's GPU ask: its limit (what the device plugin
// counts), else its request, of nvidia.com/gpu or one nvidia.com/mig-*.
func gpus(c corev1.Container) (gpuAsk, error) {
	var a gpuAsk
	for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name, q := range list {
			profile, mig := strings.CutPrefix(string(name), ResourceMIGPrefix)
			if name != ResourceGPU && !mig {
				continue
			}
			if a.resource != "" && a.resource != name {
				return gpuAsk{resource: name}, fmt.Errorf("asks %s and %s: one kind of GPU per container", a.resource, name)
			}
			if a.resource == name {
				continue // the request beside the limit
			}
			a = gpuAsk{resource: name, n: q.Value()}
			if mig {
				a.gresType = model.MIGProfileType(profile)
				if !model.ValidGresType(a.gresType) {
					return a, fmt.Errorf("%s: %q is not a MIG profile (such as 1g.10gb)", name, profile)
				}
			}
		}
	}
	return a, nil
}

// claimName is "<pod name or generateName>-gpus-<8 random>", at most 63
// characters: unique without the pod's final name.
func claimName(pod *corev1.Pod) (string, error) {
	prefix := pod.Name
	if prefix == "" {
		prefix = pod.GenerateName
	}
	if len(prefix) > 49 {
		prefix = prefix[:49]
	}
	for len(prefix) > 0 && (prefix[len(prefix)-1] == '-' || prefix[len(prefix)-1] == '.') {
		prefix = prefix[:len(prefix)-1]
	}
	const alphabet = "bcdfghjklmnpqrstvwxz2456789" // as Kubernetes' generateName: no vowels, no look-alikes
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	if prefix == "" {
		prefix = "pod"
	}
	return prefix + "-gpus-" + string(b), nil
}
