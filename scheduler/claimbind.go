package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

// claimer writes the allocation of onepool's GPU claims from the GRES
// indices Slurm gave the pod's job (read from the store).
type claimer struct {
	st       claimRecords
	kube     kubernetes.Interface
	slices   resourcelisters.ResourceSliceLister
	claims   resourcelisters.ResourceClaimLister
	recorder events.EventRecorder
	// request is what the pod asks of Slurm (its GPU count).
	request func(pod *corev1.Pod) (request, error)
}

// allocate runs before the pod is bound to node: when the pod has
// an onepool GPU claim, it writes the claim's allocation from the GRES
// indices of the pod's job on that node and reserves the claim for the
// pod. An error (wrapping ErrGPUClaim when Slurm's answer and the node's
// devices do not fit) leaves the pod unbound and says why in an event.
func (c *claimer) allocate(ctx context.Context, pod *corev1.Pod, node string) error {
	err := c.allocateClaim(ctx, pod, node)
	if err != nil && errors.Is(err, ErrGPUClaim) {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, keys.EventGPUClaimFailed, keys.ActionBind, "%v", err)
	}
	return err
}

func (c *claimer) allocateClaim(ctx context.Context, pod *corev1.Pod, node string) error {
	name, ok, err := gpuClaimName(pod)
	if !ok || err != nil {
		return err
	}
	if c.slices == nil || c.claims == nil {
		return fmt.Errorf("%w: this scheduler does not watch ResourceSlices and ResourceClaims", ErrGPUClaim)
	}
	job, slurmNode, err := c.st.jobOnNode(pod)
	if err != nil {
		return err
	}
	indexes, err := job.GPUIndexes(slurmNode)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrGPUClaim, err)
	}
	// The claim itself is read fresh: the informer may lag a retry's write.
	claims := c.kube.ResourceV1().ResourceClaims(pod.Namespace)
	claim, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// onepool's webhook names the claim and leaves it to onepool to
		// make: it holds the pod's count and goes with the pod.
		r, rerr := c.request(pod)
		if rerr != nil {
			return fmt.Errorf("%w: %w", ErrGPUClaim, rerr)
		}
		claim, err = claims.Create(ctx, newGPUClaim(pod, name, r.GPUs), metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("GPU claim %s/%s: %w", pod.Namespace, name, err)
	}
	rslices, err := c.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	others, err := c.claims.List(labels.Everything())
	if err != nil {
		return err
	}
	results, err := planGPUAllocation(node, indexes, pod.Annotations[keys.AnnotationGPUType], rslices, claim, others)
	if err != nil {
		return fmt.Errorf("Slurm job %d: %w", job.ID, err)
	}
	same := sameAllocation(claim, results)
	if claim.Status.Allocation != nil && !same {
		return fmt.Errorf("%w: claim %s/%s is already allocated other devices", ErrGPUClaim, claim.Namespace, claim.Name)
	}
	reserved := slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
	if !reserved && len(claim.Status.ReservedFor) > 0 {
		return fmt.Errorf("%w: claim %s/%s is reserved for another pod (%s)", ErrGPUClaim, claim.Namespace, claim.Name, claim.Status.ReservedFor[0].Name)
	}
	if same && reserved {
		return nil
	}
	claim = claim.DeepCopy()
	jobID := strconv.FormatUint(uint64(job.ID), 10)
	if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) || claim.Annotations[keys.AnnotationJobID] != jobID {
		// As kube-scheduler does: the claim controller deallocates (and
		// drops this finalizer) when no pod uses the claim any more, and a
		// claim is not deleted while allocated.
		if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
			claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
		}
		// The node agent prepares the claim only if these are the GPUs
		// Slurm gave this job there.
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations[keys.AnnotationJobID] = jobID
		if claim, err = claims.Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("GPU claim %s/%s: %w", pod.Namespace, name, err)
		}
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices:      resourceapi.DeviceAllocationResult{Results: results},
		NodeSelector: nodeSelector(node),
	}
	if !reserved {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	if _, err := claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("GPU claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	devs := make([]string, len(results))
	for i, r := range results {
		devs[i] = r.Device
	}
	c.recorder.Eventf(pod, nil, corev1.EventTypeNormal, keys.EventGPUsAllocated, keys.ActionBind,
		"claim %s holds %v on %s: Slurm job %d's GRES indices %s", claim.Name, devs, node, job.ID, joinInts(indexes))
	return nil
}

// newGPUClaim is the claim onepool makes for a pod that names one that
// does not exist: n GPUs of onepool's class, one request per GPU container
// as keys.AnnotationGPURequests splits them (else one request "gpus"),
// owned by the pod (the garbage collector deletes it with the pod).
func newGPUClaim(pod *corev1.Pod, name string, n int64) *resourceapi.ResourceClaim {
	split := gpuRequests(pod.Annotations[keys.AnnotationGPURequests], n)
	var reqs []resourceapi.DeviceRequest
	for _, r := range split {
		ex := &resourceapi.ExactDeviceRequest{
			DeviceClassName: keys.GPUDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: r.count}
		if t := pod.Annotations[keys.AnnotationGPUType]; t != "" && model.ValidGresType(t) {
			// What the claim asks, for whoever reads it: Slurm allocates.
			ex.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.attributes[%q][%q] == %q", keys.GPUDriverName, keys.GPUAttrGresType, t)}}}
		}
		reqs = append(reqs, resourceapi.DeviceRequest{Name: r.name, Exactly: ex})
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

type gpuRequest struct {
	name  string
	count int64
}

// gpuRequests reads "<name>=<count>,...": the split must name valid
// requests and add up to total, else the claim has one request "gpus".
func gpuRequests(v string, total int64) []gpuRequest {
	one := []gpuRequest{{"gpus", total}}
	if v == "" {
		return one
	}
	var out []gpuRequest
	var sum int64
	for _, part := range strings.Split(v, ",") {
		name, c, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil || n < 1 || len(validation.IsDNS1123Label(name)) > 0 {
			return one
		}
		out = append(out, gpuRequest{name, n})
		sum += n
	}
	if sum != total {
		return one
	}
	return out
}

// nodeSelector pins an allocation to one node, as kube-scheduler does.
func nodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}
