package scheduler

import (
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// bookRecords is the job book's view of the store: Slurm's jobs matched
// to placements. Each method takes the store's lock; the job book never
// holds it.
type bookRecords struct{ s *store }

// seen is what taking a job of an owner's changed.
type seen struct {
	key  string // the owner's placement
	lost string // another owner's placement whose job id Slurm reused ("" none)
	wake []*corev1.Pod
	// pending: how long a job this process submitted waited in Slurm's
	// queue, when it just started (0 otherwise).
	pending time.Duration
}

// observe takes job j, a placeholder of owner o: adopted when the
// placement has no job, the one onepool knows it made kept when two live
// jobs claim the owner (the other to cancel), its state recorded.
func (r bookRecords) observe(o owner, j slurmrest.Job, log klog.Logger) seen {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	out := seen{key: o.key()}
	out.lost = r.s.idReusedLocked(j.ID, out.key, log)
	p := r.s.places[out.key]
	if p == nil {
		p = newPlacement(o)
		p.note(r.s.membersLocked(o)...)
		r.s.places[out.key] = p
	}
	switch {
	case p.jobID == j.ID:
	case slices.Contains(p.abandoned, j.ID):
		// Given back (it started on a cordoned node): never adopted.
	case p.jobID == 0:
		if j.State.Finished() && (!r.s.newerThanMembersLocked(o, j) || !r.s.anyBoundLocked(o)) {
			// An earlier incarnation's job, long over; or one that ended
			// before any pod was bound to it, such as the record Slurm
			// keeps of a submission it rejected (FAILED, BadConstraints).
			// Neither placed a pod: the pods wait for a job of their own.
			break
		}
		p.jobID, p.err, p.rejected, p.waiting, p.rejections = j.ID, nil, false, "", 0
		r.s.byJob[j.ID] = out.key
	case !j.State.Finished():
		// Two live jobs for one owner: keep the one onepool knows it made
		// (submitted by this process, or recorded on a pod), else the
		// older; cancel the other. A job's own Slurm user can copy its
		// comment onto an older job of theirs: that copy never displaces
		// the job onepool made.
		if r.s.preferLocked(p, j.ID) {
			p.extra = append(p.extra, p.jobID)
			delete(r.s.byJob, p.jobID)
			p.jobID, p.job, p.nodes = j.ID, nil, nil
			r.s.byJob[j.ID] = out.key
		} else {
			p.extra = append(p.extra, j.ID)
		}
	}
	if p.jobID != j.ID {
		return out
	}
	// The id is this owner's whatever another placement claimed.
	r.s.byJob[j.ID] = out.key
	started := j.State.Base() == slurmrest.JobRunning && (p.job == nil || p.job.State.Base() == slurmrest.JobPending)
	changed, err := p.setJob(j)
	if err != nil {
		log.Error(err, "Reading the allocation of a placeholder job", "job", j.ID)
	}
	if changed {
		out.wake = r.s.membersLocked(o)
		if j.State.Base() != slurmrest.JobPending {
			delete(r.s.starting, j.ID)
		}
		if started && !p.submitted.IsZero() {
			out.pending = max(time.Since(p.submitted), time.Nanosecond)
		}
	}
	return out
}

// forget drops the state of job id when Slurm listed it active last: only
// Slurm can say now whether it still has it. It returns the key of the
// job's placement (ok false: no placement holds it).
func (r bookRecords) forget(id uint32) (key string, ok bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	key, ok = r.s.byJob[id]
	if p := r.s.places[key]; ok && p != nil && p.jobID == id && p.job != nil && !p.job.State.Finished() {
		p.job = nil
	}
	return key, ok
}

// keys are the keys of every placement.
func (r bookRecords) keys() []string {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	all := make([]string, 0, len(r.s.places))
	for k := range r.s.places {
		all = append(all, k)
	}
	return all
}

// recordedIDs are the job ids bound pods record (annotations that parse).
func (r bookRecords) recordedIDs() []recorded {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	var claims []recorded
	for _, pod := range r.s.pods {
		v, ok := pod.Annotations[keys.AnnotationJobID]
		if !ok || pod.Spec.NodeName == "" {
			continue
		}
		id, err := strconv.ParseUint(v, 10, 32)
		if err != nil || id == 0 {
			continue
		}
		claims = append(claims, recorded{pod, uint32(id)})
	}
	return claims
}

// adopt gives each pod of claims that still exists a placement for its
// recorded job when its owner's placement has none and no other owner's
// holds the id.
func (r bookRecords) adopt(claims []recorded) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, c := range claims {
		if _, live := r.s.pods[c.pod.UID]; !live {
			continue
		}
		o := ownerOf(c.pod)
		if k, taken := r.s.byJob[c.id]; taken && k != o.key() {
			continue
		}
		p := r.s.places[o.key()]
		if p == nil {
			p = newPlacement(o)
			p.note(r.s.membersLocked(o)...)
			r.s.places[o.key()] = p
		}
		if p.jobID == 0 && !p.submitting {
			p.jobID = c.id
			r.s.byJob[p.jobID] = o.key()
		}
	}
}
