package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
)

// JobGPUs answers which GPU GRES indices Slurm gave job on this node.
type JobGPUs func(ctx context.Context, job uint32) ([]int, error)

// ErrNotSlurmsGPUs means a claim's devices are not exactly the GPUs Slurm gave
// its job on this node (or it names no job). The node agent prepares only
// what Slurm allocated: onepool's scheduler writes the claim from its
// job's GRES indices and records the job on it.
var ErrNotSlurmsGPUs = errors.New("the claim's GPUs are not the ones Slurm gave its job on this node")

// claimJob is the Slurm job onepool's scheduler recorded on the claim.
func claimJob(claim *resourceapi.ResourceClaim) (uint32, error) {
	v, ok := claim.Annotations[keys.AnnotationJobID]
	if !ok {
		return 0, fmt.Errorf("%w: claim %s/%s names no Slurm job (%s): onepool's scheduler did not allocate it", ErrNotSlurmsGPUs, claim.Namespace, claim.Name, keys.AnnotationJobID)
	}
	id, err := strconv.ParseUint(v, 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: claim %s/%s: %s=%q is not a job id", ErrNotSlurmsGPUs, claim.Namespace, claim.Name, keys.AnnotationJobID, v)
	}
	return uint32(id), nil
}

// checkSlurmGRES compares the GRES indices of the claim's devices with
// those Slurm gave job on this node: they must be the same set.
func checkSlurmGRES(claim *resourceapi.ResourceClaim, pc PreparedClaim, inv *Inventory, job uint32, held []int) error {
	_, idx := gpusOf(pc, inv)
	slices.Sort(idx)
	want := slices.Clone(held)
	slices.Sort(want)
	if !slices.Equal(idx, want) {
		return fmt.Errorf("%w: claim %s/%s holds GRES indices %v, Slurm job %d holds %v here", ErrNotSlurmsGPUs, claim.Namespace, claim.Name, idx, job, want)
	}
	return nil
}

// verifySlurm checks a claim about to be prepared against Slurm. A
// refusal is also an event on the pod the claim is reserved for (or the
// claim), so its owner sees both sets.
func (d *Driver) verifySlurm(ctx context.Context, claim *resourceapi.ResourceClaim, pc PreparedClaim) error {
	if d.cfg.JobGPUs == nil || len(pc.Devices) == 0 {
		return nil
	}
	job, err := claimJob(claim)
	if err == nil {
		var held []int
		held, err = d.cfg.JobGPUs(ctx, job)
		if err != nil {
			// Not a refusal: Slurm could not be asked (the kubelet retries).
			return fmt.Errorf("asking Slurm for job %d's GPUs on this node: %w", job, err)
		}
		err = checkSlurmGRES(claim, pc, d.inv, job, held)
	}
	if err != nil {
		d.event(ctx, claim, err.Error())
	}
	return err
}

// event records a refusal as a Warning event (best effort, bounded).
func (d *Driver) event(ctx context.Context, claim *resourceapi.ResourceClaim, msg string) {
	if d.cfg.Client == nil {
		return
	}
	ref := corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			ref = corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: claim.Namespace, Name: r.Name, UID: r.UID}
			break
		}
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: claim.Namespace},
		InvolvedObject: ref, Reason: keys.EventGPUClaimRefused, Message: msg, Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "onepool-node-agent", Host: d.cfg.NodeName}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.cfg.Client.CoreV1().Events(claim.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		d.logf("event for %s/%s: %v", claim.Namespace, claim.Name, err)
	}
}
