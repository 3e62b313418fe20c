package scheduler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// preemptMargin: a preempted pod's termination grace ends this long before
// Slurm's deadline, so the pod is gone (and its GPUs released) before
// Slurm kills the job.
const preemptMargin = 2 * time.Second

// eviction is why onepool evicts a placement's pods.
type eviction struct {
	reason string // the event's reason
	label  string // onepool_scheduler_evictions_total{cause}
	note   string // the event's message
	// deadline, for a preemption: when Slurm ends the job (zero: unknown).
	deadline time.Time
}

// evictionCause says why the pods of job id go: Slurm no longer knows the
// job, it ended, or (it still runs) Slurm began preempting it.
func evictionCause(id uint32, job *slurmrest.Job, missing bool) eviction {
	switch {
	case missing || job == nil:
		return eviction{reason: keys.EventJobMissing, label: causeJobMissing,
			note: fmt.Sprintf("Slurm no longer knows placeholder job %d; evicting the pod", id)}
	case job.State.Finished():
		return eviction{reason: keys.EventJobEnded, label: causeJobEnded,
			note: fmt.Sprintf("Slurm job %d ended (%s); evicting the pod", id, stateReason(job))}
	}
	e := eviction{reason: keys.EventJobPreempted, label: causePreempted}
	qos := ""
	if job.QOS != "" {
		qos = " (QOS " + job.QOS + ")"
	}
	e.note = fmt.Sprintf("Slurm began preempting job %d%s at %s for a job it ranks higher (QOS/partition preemption); evicting the pod",
		id, qos, job.PreemptTime.UTC().Format(time.RFC3339))
	if !job.EndTime.IsZero() && job.EndTime.After(job.PreemptTime) {
		e.deadline = job.EndTime
		e.note += fmt.Sprintf(" so that it stops before Slurm's deadline %s (GraceTime %s)",
			job.EndTime.UTC().Format(time.RFC3339), job.EndTime.Sub(job.PreemptTime))
	}
	return e
}

// evictionGrace is the termination grace to evict pod with: for a
// preemption, the pod's own cut to end preemptMargin before Slurm's
// deadline (at least 1 s, so the kubelet still stops it); otherwise nil,
// the pod's own.
func evictionGrace(pod *corev1.Pod, e eviction, now time.Time) *int64 {
	if e.deadline.IsZero() {
		return nil
	}
	g := int64((e.deadline.Sub(now) - preemptMargin) / time.Second)
	own := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		own = *pod.Spec.TerminationGracePeriodSeconds
	}
	g = max(min(g, own), 1)
	return &g
}
