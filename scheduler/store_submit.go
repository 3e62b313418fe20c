package scheduler

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/slurmrest"
)

// submitRecords is the submitter's view of the store: what a submission
// reads of its placement and writes back. Each method takes the store's
// lock; the submitter never holds it.
type submitRecords struct{ s *store }

// begin reads the placement of key for a submission: nil when it is gone or
// has a job already (then it is no longer submitting).
func (r submitRecords) begin(key string) (p *placement, members []*corev1.Pod, inDoubt time.Time) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p = r.s.places[key]
	if p == nil || p.jobID != 0 {
		if p != nil {
			p.submitting = false
		}
		return nil, nil, time.Time{}
	}
	return p, r.s.membersLocked(p.owner), p.inDoubt
}

// outcome is what a submission that made no job ends with.
type outcome struct {
	err      error
	rejected bool   // Slurm (or onepool's checks) refused the job as asked
	waiting  string // why nothing is asked yet
}

// finish records a submission that made no job. A pod whose Slurm settings
// changed while the submission judged the old ones (the scheduling queue
// placed the new pod before onepool's informer had it) makes the outcome
// errAskMoved: its refusal is not the new pod's. It returns the outcome as
// recorded, whether to retry after backoff and the delay before a rejected
// placement is tried again.
func (r submitRecords) finish(p *placement, members []*corev1.Pod, out outcome) (recorded outcome, retry bool, again time.Duration) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if (out.err != nil || out.waiting != "") && r.s.askMovedLocked(members) {
		out = outcome{err: errAskMoved}
	}
	retry = out.waiting == "" && out.err != nil && !out.rejected
	p.reserved = 0
	p.submitting = retry
	p.err, p.rejected, p.waiting = out.err, out.rejected, out.waiting
	if out.err != nil {
		p.errAt = time.Now()
	}
	if out.rejected {
		p.rejections++
		again = rejectDelay(p.rejections)
	}
	return out, retry, again
}

// capped marks a placement that waits for its TenantPolicy's GPU cap.
func (r submitRecords) capped(p *placement) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p.capped = true
}

// avoid is a copy of the nodes of the jobs the placement gave back.
func (r submitRecords) avoid(p *placement) []string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return slices.Clone(p.avoid)
}

// unfit records why no node fits the pods ("" one does) and returns what
// was recorded before (the message last told in an event).
func (r submitRecords) unfit(p *placement, unfit string) (told string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	told, p.unfit = p.unfit, unfit
	return told
}

// constrained records that Slurm refused a job that left nodes out (or
// not).
func (r submitRecords) constrained(p *placement, excluded bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p.constrained = excluded
}

// inDoubt records a submission that got no answer from Slurm itself: it
// may have made the job.
func (r submitRecords) inDoubt(p *placement) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p.inDoubt = time.Now()
}

// submitted records job id, made for the placement of key (now: Slurm
// granted it at once). It returns the key of another owner's placement
// that held the id (its job is gone: idReusedLocked), "" when none.
func (r submitRecords) submitted(p *placement, key string, id uint32, now bool, excluded []string, log klog.Logger) (lost string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	lost = r.s.idReusedLocked(id, key, log)
	if p.jobID == 0 { // the cache may have reported it already
		p.jobID = id
		r.s.byJob[id] = key
	}
	p.submitting, p.err, p.rejected, p.waiting, p.rejections = false, nil, false, "", 0
	p.inDoubt, p.reserved = time.Time{}, 0
	p.excluded = excluded
	p.submitted = time.Now()
	if !now {
		r.s.starting[id] = time.Now()
	}
	return lost
}

// starting has the job watch poll job id until it starts.
func (r submitRecords) starting(id uint32) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.starting[id] = time.Now()
}

// refused records that Slurm refused an immediate allocation in partition.
func (r submitRecords) refused(partition string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.refusedAt[partition] = time.Now()
}

// mayAllocateNow says whether an immediate allocation in partition is
// worth asking: Slurm keeps every refused one as a FAILED job (squeue
// until MinJobAge, sacct for good), so none is asked while one of
// onepool's own jobs of that partition waits in the queue (the partition
// is full, and Slurm would not let a newer job pass it), nor within
// allocRetry of a refusal there.
func (r submitRecords) mayAllocateNow(partition string) bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if time.Since(r.s.refusedAt[partition]) < allocRetry {
		return false
	}
	for _, p := range r.s.places {
		if p.job != nil && p.job.State.Base() == slurmrest.JobPending && (partition == "" || p.job.Partition == partition) {
			return false
		}
	}
	return true
}
