package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/slurmrest/model"
)

// placement is onepool's record of one owner's place in Slurm: the
// placeholder job, its last known state and which pod runs on which of
// its nodes.
type placement struct {
	owner owner

	jobID     uint32
	job       *slurmrest.Job // last known; nil until seen
	submitted time.Time
	missing   bool // Slurm confirmed it does not know jobID

	submitting bool
	err        error // the last submission failure
	errAt      time.Time
	// inDoubt: when a submission failed without an answer from Slurm
	// itself (it may have made the job); zero when none is in doubt.
	inDoubt  time.Time
	rejected bool // Slurm refused the job as asked: wait for a pod change or rejectDelay
	// rejections: Slurm's refusals of this placement's job in a row.
	rejections int
	waiting    string // why nothing is submitted yet (an incomplete gang)
	// reserved: GPUs counted against the TenantPolicy's cap while the
	// submission is under way (0 once it ends).
	reserved int64
	capped   bool // waits for the TenantPolicy's GPU cap
	// unfit: no Slurm node meets the pods' node constraints (the message
	// last told in an event); placed again when a Node changes.
	unfit string
	// constrained: Slurm refused a job that left nodes out; a Node that
	// changes may let it run (asked again then, not after rejectDelay).
	constrained bool

	nodes    []string             // the allocation, in Slurm's order
	assigned map[types.UID]string // pod → Slurm node
	extra    []uint32             // duplicate jobs of this owner, to cancel
	// abandoned are jobs given back because Slurm started them on a node
	// the pods cannot use: never adopted again (their cancel may lag).
	abandoned []uint32
	// avoid: the Slurm nodes of those jobs, left out of every job asked
	// after them.
	avoid []string
	// excluded: the Slurm nodes the job leaves out, as last told to Slurm.
	excluded []string
	// reexclude: a Node changed while the job waited in the queue; its
	// excluded nodes are worked out again (lifecycle).
	reexclude bool

	// closing: onepool cancelled the job because its pods are gone.
	closing bool
	// seen: a gang's pods that were its members while the job took pods
	// (see closed). Only they are the job's: bound to it, evicted when it
	// ends.
	seen map[types.UID]bool
}

func newPlacement(o owner) *placement {
	return &placement{owner: o, assigned: map[types.UID]string{}, seen: map[types.UID]bool{}}
}

// closed says whether the job takes no more pods: it ended, Slurm is
// preempting it, or onepool cancelled it because its pods are gone. A
// gang's pod made after that (a LeaderWorkerSet makes a preempted group
// again at once; a PodGroup or LeaderWorkerSet deleted and made again
// under its name) is not one of its pods: it is not bound to the job nor
// evicted when it ends, and waits until the job is over for one of its own.
func (p *placement) closed() bool {
	return p.closing || p.ended() || (p.job != nil && !p.job.PreemptTime.IsZero())
}

// note records pods as the job's while it takes pods (a gang's; a single
// pod's owner is the pod).
func (p *placement) note(pods ...*corev1.Pod) {
	if !p.owner.group() || p.closed() {
		return
	}
	for _, m := range pods {
		p.seen[m.UID] = true
	}
}

// ofJob says whether pod is one of the pods the job is for.
func (p *placement) ofJob(pod *corev1.Pod) bool { return !p.owner.group() || p.seen[pod.UID] }

// goneCounts says which pods, listed by the API server, keep the owner
// from being gone: any, or once a gang's job closed, those it saw.
func (p *placement) goneCounts() func(types.UID) bool {
	if !p.owner.group() || !p.closed() {
		return func(types.UID) bool { return true }
	}
	seen := maps.Clone(p.seen)
	return func(uid types.UID) bool { return seen[uid] }
}

// split parts an owner's members into the job's and those made after it
// closed.
func (p *placement) split(members []*corev1.Pod) (ofJob, later []*corev1.Pod) {
	for _, m := range members {
		if p.ofJob(m) {
			ofJob = append(ofJob, m)
		} else {
			later = append(later, m)
		}
	}
	return ofJob, later
}

// ended says whether the job is over for good: the pods must go.
func (p *placement) ended() bool {
	return p.missing || (p.job != nil && p.job.State.Finished())
}

// setJob records a job's latest state and, once it runs, its nodes. It
// reports whether the pods should look again (state, reason or nodes
// changed).
func (p *placement) setJob(j slurmrest.Job) (changed bool, err error) {
	old := p.job
	p.job = &j
	if j.State.Base() == slurmrest.JobRunning && len(p.nodes) == 0 && j.Nodes != "" {
		nodes, err := model.ExpandHostlist(j.Nodes)
		if err != nil {
			return true, err
		}
		p.nodes = nodes
	}
	return old == nil || !slices.Equal(old.State, j.State) || old.Reason != j.Reason, nil
}

// abandon gives the job back (to be cancelled) and clears the allocation,
// so a new job is asked for.
func (p *placement) abandon() {
	p.extra = append(p.extra, p.jobID)
	p.abandoned = append(p.abandoned, p.jobID)
	p.jobID, p.job, p.nodes, p.missing, p.excluded, p.reexclude, p.closing = 0, nil, nil, false, nil, false, false
	p.assigned = map[types.UID]string{}
}

// nodeFor returns the Slurm node pod runs on: the single node, or for a
// gang the node assigned to the pod, assigning a free one on first ask.
func (p *placement) nodeFor(pod *corev1.Pod, members []*corev1.Pod) string {
	if n, ok := p.assigned[pod.UID]; ok {
		return n
	}
	used := map[string]bool{}
	live := map[types.UID]bool{}
	for _, m := range members {
		live[m.UID] = true
	}
	for uid, n := range p.assigned {
		if live[uid] {
			used[n] = true
		} else {
			delete(p.assigned, uid) // that pod is gone; its node is free for its replacement
		}
	}
	for _, n := range p.nodes {
		if !used[n] {
			p.assigned[pod.UID] = n
			return n
		}
	}
	return ""
}

// pendingMessage says, for kubectl describe, why the pod is not bound yet.
func (p *placement) pendingMessage() string {
	switch {
	case p.jobID == 0 && p.waiting != "":
		return p.waiting
	case p.jobID == 0 && p.rejected:
		return fmt.Sprintf("Slurm rejected the placeholder job: %v", p.err)
	case p.jobID == 0 && p.err != nil:
		return fmt.Sprintf("cannot submit the placeholder job to Slurm (retrying): %v", p.err)
	case p.jobID == 0:
		return "submitting a placeholder job to Slurm"
	case p.missing:
		return fmt.Sprintf("Slurm job %d no longer exists; the pod will be evicted", p.jobID)
	case p.job == nil:
		return fmt.Sprintf("Slurm job %d submitted; waiting for its state", p.jobID)
	case p.job.State.Finished():
		return fmt.Sprintf("Slurm job %d ended (%s); the pod will be evicted", p.jobID, stateReason(p.job))
	case p.job.State.Base() == slurmrest.JobPending:
		return fmt.Sprintf("waiting in Slurm's queue: job %d is PENDING (%s)", p.jobID, p.job.Reason)
	default:
		return fmt.Sprintf("Slurm job %d is %s", p.jobID, stateReason(p.job))
	}
}

func stateReason(j *slurmrest.Job) string {
	s := j.State.Base()
	if j.Reason != "" && j.Reason != "None" {
		s += ", reason " + j.Reason
	}
	return s
}
