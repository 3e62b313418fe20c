package scheduler

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/slurmrest"
)

// lifeRecords is the lifecycle's view of the store: a placement's state as
// one reconcile reads it, and what ending pods and jobs writes back. Each
// method takes the store's lock; the lifecycle never holds it.
type lifeRecords struct{ s *store }

// lifeView is a placement as one reconcile reads it, taken at once.
type lifeView struct {
	p         *placement
	owner     owner
	jobID     uint32
	extra     []uint32       // duplicates to cancel, taken from the placement
	job       *slurmrest.Job // a copy; nil until seen
	submitted time.Time
	missing   bool
	reexclude bool
	// members are the pods of the job: a gang's pods made after its job
	// closed are not (they wait for it to end: dropIfIdle then wakes them
	// for a job of their own), and are neither evicted for it nor counted.
	members []*corev1.Pod
	counts  func(types.UID) bool // whether a pod that is gone was the job's
}

// view reads the placement of key (ok false: there is none) and takes its
// duplicate jobs to cancel.
func (r lifeRecords) view(key string) (v lifeView, ok bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p := r.s.places[key]
	if p == nil {
		return v, false
	}
	v = lifeView{p: p, owner: p.owner, jobID: p.jobID, extra: p.extra,
		submitted: p.submitted, missing: p.missing, reexclude: p.reexclude}
	p.extra = nil
	if p.job != nil {
		j := *p.job
		v.job = &j
	}
	v.members, _ = p.split(r.s.membersLocked(p.owner))
	v.counts = p.goneCounts()
	return v, true
}

// keepExtra gives back a duplicate job whose cancel failed.
func (r lifeRecords) keepExtra(p *placement, id uint32) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p.extra = append(p.extra, id)
}

// missing records that Slurm denies knowing the placement's job.
func (r lifeRecords) missing(p *placement) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p.missing = true
}

// disown drops job id from the placement of key while it was never seen:
// the id (a pod's own word) names a job that is not the owner's.
func (r lifeRecords) disown(p *placement, key string, id uint32) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if p.jobID == id && p.job == nil {
		p.jobID = 0
		if r.s.byJob[id] == key {
			delete(r.s.byJob, id)
		}
	}
}

// closing records that onepool cancels job id because its pods are gone: a
// pod made from now on waits for a job of its own.
func (r lifeRecords) closing(p *placement, id uint32) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if p.jobID == id {
		p.closing = true
	}
}

// reexcluded clears the placement's flag to work out job id's excluded
// nodes again.
func (r lifeRecords) reexcluded(p *placement, id uint32) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if p.jobID == id {
		p.reexclude = false
	}
}

// exclusions are copies of the nodes the placement avoids and of those its
// job leaves out, as last told to Slurm.
func (r lifeRecords) exclusions(p *placement) (avoid, excluded []string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return slices.Clone(p.avoid), slices.Clone(p.excluded)
}

// excluded records the nodes job id leaves out, as told to Slurm.
func (r lifeRecords) excluded(p *placement, id uint32, excluded []string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if p.jobID == id {
		p.excluded = excluded
	}
}

// evicting records that pod uid is being evicted; first says it was not
// before.
func (r lifeRecords) evicting(uid types.UID) (first bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if _, seen := r.s.evicting[uid]; seen {
		return false
	}
	r.s.evicting[uid] = time.Now()
	return true
}

// dropIfIdle forgets the placement of key when its pods and job are both
// done, and returns the pods to wake: a gang's pods made after its job
// closed (they ask for a job of their own) and the pods that waited for a
// TenantPolicy's GPU cap.
func (r lifeRecords) dropIfIdle(key string, p *placement) (wake []*corev1.Pod) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	ofJob, later := p.split(r.s.membersLocked(p.owner))
	if r.s.places[key] != p || p.submitting || len(ofJob) > 0 {
		return nil
	}
	wake = append(wake, later...)
	for _, q := range r.s.places {
		if q.capped {
			q.capped = false
			wake = append(wake, r.s.membersLocked(q.owner)...)
		}
	}
	delete(r.s.places, key)
	delete(r.s.byJob, p.jobID)
	if p.jobID != 0 {
		r.s.released[p.jobID] = time.Now() // its pods are confirmed gone
	}
	delete(r.s.starting, p.jobID)
	for uid := range p.assigned {
		delete(r.s.evicting, uid)
	}
	return wake
}
