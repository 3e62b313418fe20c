package scheduler

// Slurm's jobs as the cache and the start poller show them: a placeholder
// of onepool's is matched to its owner (adopted after a restart), the
// newest of a reused id preferred, and a job that went forgotten.

import (
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// jobBook matches Slurm's jobs to the store's placements: onepool's
// placeholders (by their signed comment) are followed, adopted after a
// restart, and a bound pod's recorded job id is adopted when no one else
// holds it.
type jobBook struct {
	st      *store
	jobs    JobCache
	lifeQ   workqueue.TypedRateLimitingInterface[string]
	metrics *metrics
	log     klog.Logger
	// proof checks placeholder comments (loaded before any job is read);
	// activate moves pods back into the scheduling queue.
	proof    func() *commentKeys
	activate func(pods []*corev1.Pod)
}

// observe takes a job from the cache or the start poller. Jobs onepool did
// not submit are ignored; a placeholder of an owner onepool has no record
// of (after a restart) is adopted.
func (c *jobBook) observe(j slurmrest.Job) {
	o, ok := c.proof().jobOwner(j)
	if !ok {
		return
	}
	var wake []*corev1.Pod
	c.st.mu.Lock()
	key := o.key()
	lost := c.st.idReusedLocked(j.ID, key, c.log)
	p := c.st.places[key]
	if p == nil {
		p = newPlacement(o)
		p.note(c.st.membersLocked(o)...)
		c.st.places[key] = p
	}
	switch {
	case p.jobID == j.ID:
	case slices.Contains(p.abandoned, j.ID):
		// Given back (it started on a cordoned node): never adopted.
	case p.jobID == 0:
		if j.State.Finished() && (!c.st.newerThanMembersLocked(o, j) || !c.st.anyBoundLocked(o)) {
			// An earlier incarnation's job, long over; or one that ended
			// before any pod was bound to it, such as the record Slurm
			// keeps of a submission it rejected (FAILED, BadConstraints).
			// Neither placed a pod: the pods wait for a job of their own.
			break
		}
		p.jobID, p.err, p.rejected, p.waiting, p.rejections = j.ID, nil, false, "", 0
		c.st.byJob[j.ID] = key
	case !j.State.Finished():
		// Two live jobs for one owner: keep the one onepool knows it made
		// (submitted by this process, or recorded on a pod), else the
		// older; cancel the other. A job's own Slurm user can copy its
		// comment onto an older job of theirs: that copy never displaces
		// the job onepool made.
		if c.st.preferLocked(p, j.ID) {
			p.extra = append(p.extra, p.jobID)
			delete(c.st.byJob, p.jobID)
			p.jobID, p.job, p.nodes = j.ID, nil, nil
			c.st.byJob[j.ID] = key
		} else {
			p.extra = append(p.extra, j.ID)
		}
	}
	if p.jobID == j.ID {
		// The id is this owner's whatever another placement claimed.
		c.st.byJob[j.ID] = key
		started := j.State.Base() == slurmrest.JobRunning && (p.job == nil || p.job.State.Base() == slurmrest.JobPending)
		changed, err := p.setJob(j)
		if err != nil {
			c.log.Error(err, "Reading the allocation of a placeholder job", "job", j.ID)
		}
		if changed {
			wake = c.st.membersLocked(o)
			if j.State.Base() != slurmrest.JobPending {
				delete(c.st.starting, j.ID)
			}
			if started && !p.submitted.IsZero() {
				c.metrics.pending.Observe(time.Since(p.submitted).Seconds())
			}
		}
	}
	c.st.mu.Unlock()
	c.lifeQ.Add(key)
	if lost != "" {
		c.lifeQ.Add(lost)
	}
	if len(wake) > 0 {
		c.activate(wake)
	}
}

// forget drops a job Slurm purged from its records.
func (c *jobBook) forget(j slurmrest.Job) {
	c.st.mu.Lock()
	key, ok := c.st.byJob[j.ID]
	if p := c.st.places[key]; ok && p != nil && p.jobID == j.ID && p.job != nil && !p.job.State.Finished() {
		// Slurm lists no more a job it last listed active (a job that ends
		// is listed ended first): only Slurm can say whether it still has
		// it. Unknown now, the lifecycle asks, and a job Slurm denies is
		// missing.
		p.job = nil
	}
	c.st.mu.Unlock()
	if ok {
		c.lifeQ.Add(key)
	}
}

// requeueAll reconciles every placement, and every bound pod's recorded
// job (an orphan pod whose job Slurm no longer has).
func (c *jobBook) requeueAll() {
	c.adoptRecorded()
	c.st.mu.Lock()
	all := make([]string, 0, len(c.st.places))
	for k := range c.st.places {
		all = append(all, k)
	}
	c.st.mu.Unlock()
	for _, k := range all {
		c.lifeQ.Add(k)
	}
}

// recorded is a bound pod's job id annotation: a claim, not a proof.
type recorded struct {
	pod *corev1.Pod
	id  uint32
}

// adoptRecorded gives a bound pod that records a job id a placement for
// that job if it has none: when Slurm no longer knows the job, the pod is
// an orphan and reconcile evicts it. The annotation is the pod's own word
// (its author can write it too), so it never takes a job from another
// owner: not one onepool already holds for someone else, and not one
// Slurm lists with a comment that is not this owner's, signed.
func (c *jobBook) adoptRecorded() {
	c.st.mu.Lock()
	var claims []recorded
	for _, pod := range c.st.pods {
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
	c.st.mu.Unlock()
	var ok []recorded
	for _, r := range claims {
		if j, err := c.jobs.Job(r.id); err == nil && !c.jobOf(j, ownerOf(r.pod)) {
			continue
		}
		ok = append(ok, r)
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	for _, r := range ok {
		if _, live := c.st.pods[r.pod.UID]; !live {
			continue
		}
		o := ownerOf(r.pod)
		if k, taken := c.st.byJob[r.id]; taken && k != o.key() {
			continue
		}
		p := c.st.places[o.key()]
		if p == nil {
			p = newPlacement(o)
			p.note(c.st.membersLocked(o)...)
			c.st.places[o.key()] = p
		}
		if p.jobID == 0 && !p.submitting {
			p.jobID = r.id
			c.st.byJob[p.jobID] = o.key()
		}
	}
}

// jobOf says whether job j is the placeholder of owner o: its comment
// names o and onepool signed it.
func (c *jobBook) jobOf(j slurmrest.Job, o owner) bool {
	jo, ok := c.proof().jobOwner(j)
	return ok && jo.key() == o.key()
}
