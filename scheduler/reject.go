package scheduler

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// offer is the most one Kubernetes node offers a pod: what would fit.
type offer struct {
	GPUs, CPUs int64
}

// largestOffer reads the Nodes: the most allocatable GPUs and CPUs of any
// one of them. Zero when nothing is known.
func largestOffer(nodes corelisters.NodeLister) offer {
	var o offer
	if nodes == nil {
		return o
	}
	all, err := nodes.List(labels.Everything())
	if err != nil {
		return o
	}
	for _, n := range all {
		if q, ok := n.Status.Allocatable[ResourceGPU]; ok {
			o.GPUs = max(o.GPUs, q.Value())
		}
		if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
			o.CPUs = max(o.CPUs, q.Value())
		}
	}
	return o
}

// explainRejection puts into words why Slurm refused a pod's placeholder
// job, from Slurm's error number (never its English text): the setting or
// request at fault, where it came from, and, when no node can ever run it,
// what would fit. The Slurm error stays wrapped. An error it cannot explain
// comes back as it is.
func explainRejection(err error, pod *corev1.Pod, req request, largest offer, excluded []string) error {
	var ae *slurmrest.APIError
	if !errors.As(err, &ae) {
		return err
	}
	from := func(ann, def string) string {
		if _, ok := pod.Annotations[ann]; ok {
			return "annotation " + ann
		}
		return "the scheduler's " + def
	}
	var why string
	switch ae.FirstErrno() {
	case slurmrest.ErrnoInvalidPartition:
		why = fmt.Sprintf("partition %q does not exist in Slurm (from %s)", req.Partition, from(keys.AnnotationJobPartition, "defaultPartition"))
	case slurmrest.ErrnoPartitionNotAvail:
		why = fmt.Sprintf("partition %q does not take jobs from this user or account (from %s)", req.Partition, from(keys.AnnotationJobPartition, "defaultPartition"))
	case slurmrest.ErrnoInvalidQOS:
		why = fmt.Sprintf("QOS %q does not exist or the account may not use it (from %s)", req.QOS, from(keys.AnnotationJobQOS, "defaultQOS"))
	case slurmrest.ErrnoInvalidAccount:
		why = fmt.Sprintf("account %q does not exist or onepool's Slurm user has no association with it (from %s)", req.Account, from(keys.AnnotationJobAccount, "defaultAccount"))
	case slurmrest.ErrnoInvalidTimeLimit:
		why = fmt.Sprintf("time limit %s is over the partition's or QOS's maximum (from %s)", timeLimitText(req.TimeLimit), from(keys.AnnotationJobTimeLimit, "defaultTimeLimit"))
	case slurmrest.ErrnoAccountingPolicy:
		why = "a limit of the account's association or of the QOS forbids this job"
	case slurmrest.ErrnoNodeConfigUnavailable, slurmrest.ErrnoTooManyCPUs, slurmrest.ErrnoPartConfigUnavailable, slurmrest.ErrnoInvalidGRES:
		if len(excluded) > 0 {
			// The nodes left out may be the only ones that could.
			why = "Slurm can never run it: no node" + inPartition(req.Partition) + " but the " + fmt.Sprint(len(excluded)) +
				" its node constraints leave out (" + strings.Join(excluded, ",") + ") has " + asks(req) + " for one pod"
			break
		}
		why = "Slurm can never run it: no node" + inPartition(req.Partition) + " has " + asks(req) + " for one pod" + fits(req, largest)
	default:
		return err
	}
	return fmt.Errorf("%s: %w", why, err)
}

func inPartition(p string) string {
	if p == "" {
		return ""
	}
	return fmt.Sprintf(" in partition %q", p)
}

func asks(r request) string {
	parts := []string{fmt.Sprintf("%d %s", r.GPUs, ResourceGPU), fmt.Sprintf("%d CPUs", r.CPUs)}
	if r.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("%d MiB of memory", r.MemoryMB))
	}
	return strings.Join(parts, ", ")
}

// fits says what the largest node offers where the request is above it.
func fits(r request, o offer) string {
	var parts []string
	if o.GPUs > 0 && r.GPUs > o.GPUs {
		parts = append(parts, fmt.Sprintf("%d %s", o.GPUs, ResourceGPU))
	}
	if o.CPUs > 0 && int64(r.CPUs) > o.CPUs {
		parts = append(parts, fmt.Sprintf("%d CPUs", o.CPUs))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; the largest node offers " + strings.Join(parts, " and ")
}
