package scheduler

// Slurm's jobs as the cache and the start poller show them: a placeholder
// of onepool's is matched to its owner (adopted after a restart), the
// newest of a reused id preferred, and a job that went forgotten.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/slurmrest"
)

// jobBook matches Slurm's jobs to the store's placements: onepool's
// placeholders (by their signed comment) are followed, adopted after a
// restart, and a bound pod's recorded job id is adopted when no one else
// holds it.
type jobBook struct {
	st      bookRecords
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
	got := c.st.observe(o, j, c.log)
	if got.pending > 0 {
		c.metrics.pending.Observe(got.pending.Seconds())
	}
	c.lifeQ.Add(got.key)
	if got.lost != "" {
		c.lifeQ.Add(got.lost)
	}
	if len(got.wake) > 0 {
		c.activate(got.wake)
	}
}

// forget drops a job Slurm purged from its records. A job it last listed
// active (a job that ends is listed ended first) is unknown now: the
// lifecycle asks Slurm, and a job Slurm denies is missing.
func (c *jobBook) forget(j slurmrest.Job) {
	if key, ok := c.st.forget(j.ID); ok {
		c.lifeQ.Add(key)
	}
}

// requeueAll reconciles every placement, and every bound pod's recorded
// job (an orphan pod whose job Slurm no longer has).
func (c *jobBook) requeueAll() {
	c.adoptRecorded()
	for _, k := range c.st.keys() {
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
	var ok []recorded
	for _, r := range c.st.recordedIDs() {
		if j, err := c.jobs.Job(r.id); err == nil && !c.jobOf(j, ownerOf(r.pod)) {
			continue
		}
		ok = append(ok, r)
	}
	c.st.adopt(ok)
}

// jobOf says whether job j is the placeholder of owner o: its comment
// names o and onepool signed it.
func (c *jobBook) jobOf(j slurmrest.Job, o owner) bool {
	jo, ok := c.proof().jobOwner(j)
	return ok && jo.key() == o.key()
}
