package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// errRetry marks a submission to try again after backoff.
var errRetry = errors.New("retry")

// submitter makes each placement's placeholder job, once, from its queue:
// it checks the gang, the pods' asks, their TenantPolicy's cap and where
// they may run, then asks Slurm (an allocation at once, or a job in its
// queue) and records the job in the store.
type submitter struct {
	st       submitRecords
	q        workqueue.TypedRateLimitingInterface[string]
	lifeQ    workqueue.TypedRateLimitingInterface[string]
	retry    *retrier
	args     *Args
	slurm    Slurm
	jobs     JobCache
	groups   GroupReader
	pol      *policies
	fitter   *fitter
	leader   Leadership
	metrics  *metrics
	recorder events.EventRecorder
	log      klog.Logger
	script   func(owner) string
	ownUser  func() (string, error)
	// proof signs the job's comment (loaded before any submission);
	// observe takes a job Slurm granted at once; activate moves pods
	// back into the scheduling queue.
	proof    func() *commentKeys
	observe  func(slurmrest.Job)
	activate func(pods []*corev1.Pod)
}

// run submits until the queue shuts down.
func (c *submitter) run(ctx context.Context) {
	for {
		key, quit := c.q.Get()
		if quit {
			return
		}
		err := c.submit(ctx, key)
		if errors.Is(err, errRetry) && ctx.Err() == nil {
			c.q.AddRateLimited(key)
		} else {
			c.q.Forget(key)
		}
		c.q.Done(key)
	}
}

// errAskMoved: the pods' Slurm settings changed during a submission.
var errAskMoved = errors.New("the pod's Slurm settings changed while its job was being asked for; asking again")

// submit makes the placeholder job of one owner, once.
func (c *submitter) submit(ctx context.Context, key string) error {
	p, members, doubt := c.st.begin(key)
	if p == nil {
		return nil
	}
	o := p.owner
	stale := c.jobs.Stale()

	// finish records the outcome and wakes the pods so their message
	// says it; a failure that passes is retried after backoff.
	finish := func(err error, rejected bool, waiting string, members []*corev1.Pod) error {
		out, retry, again := c.st.finish(p, members, outcome{err: err, rejected: rejected, waiting: waiting})
		switch {
		case out.rejected:
			c.metrics.submissions.WithLabelValues(submitRejected).Inc()
		case out.err != nil:
			c.metrics.submissions.WithLabelValues(submitFailed).Inc()
		}
		if again > 0 {
			c.retry.rejected(key, again)
		}
		// The pods woken may run a cycle (Place) at once: what it marks
		// on p is its own, read only under the store's lock.
		c.activate(members)
		if retry {
			return errRetry
		}
		return nil
	}
	if len(members) == 0 {
		return finish(nil, false, "", nil)
	}
	if stale {
		// Without a fresh view of Slurm's jobs a submission could
		// duplicate a placeholder a restart has not adopted yet.
		return finish(errors.New("Slurm's state is unknown"), false, "", members)
	}
	if !c.leader.IsLeader() {
		// A replica whose lease lapsed may race the new leader's adoption.
		return finish(errors.New("this scheduler replica no longer holds the lease"), false, "", members)
	}
	if !doubt.IsZero() && !c.jobs.JobsListedAt().After(doubt) {
		// The last submission got no answer Slurm gave: it may have made
		// the job. Only a listing of Slurm's jobs begun after it says
		// whether (observe adopts the job by its comment); submitting
		// again before would make a second job for the same pods.
		c.jobs.RefreshJobs()
		return finish(errors.New("waiting for Slurm's job list to show whether the last submission made a job"), false, "", members)
	}
	nodes := 1
	if o.group() {
		g, err := groupOf(ctx, c.groups, o)
		if err != nil {
			return finish(nil, false, fmt.Sprintf("waiting for %s: %v", o, err), members)
		}
		if len(members) < g.MinMember {
			return finish(nil, false, fmt.Sprintf("waiting for %s: %d of its %d pods exist", o, len(members), g.MinMember), members)
		}
		nodes, members = g.MinMember, members[:g.MinMember]
		o.UID = g.UID
	}
	req, err := c.pol.request(members[0])
	if err != nil {
		return finish(err, true, "", members)
	}
	for _, m := range members[1:] {
		r, err := c.pol.request(m)
		if err != nil || !sameShape(req, r) {
			return finish(fmt.Errorf("the pods of %s ask different resources or Slurm settings; one job gives every node the same", o), true, "", members)
		}
	}
	if msg := c.pol.overCap(o, req, nodes); msg != "" {
		c.st.capped(p)
		return finish(nil, false, msg, members)
	}
	excluded, unfit, err := c.fitter.exclude(ctx, members, c.st.avoid(p))
	if err != nil {
		return finish(err, false, "", members)
	}
	told := c.st.unfit(p, unfit)
	if unfit != "" {
		if unfit != told {
			for _, m := range members {
				c.recorder.Eventf(m, nil, corev1.EventTypeWarning, keys.EventNoNodeFits, keys.ActionSubmit, "%s; nothing is asked of Slurm until a node fits", unfit)
			}
		}
		return finish(nil, false, unfit, members)
	}
	user := req.User
	if user == "" && c.ownUser != nil {
		if user, err = c.ownUser(); err != nil {
			return finish(fmt.Errorf("reading the Slurm user of onepool's token: %w", err), false, "", members)
		}
	}
	job := jobFor(o, c.proof().comment(o, user), req, nodes, c.args, "")
	job.ExcludedNodes = excluded
	id, now, err := c.place(slurmrest.AsUser(ctx, req.User), o, job)
	if err != nil {
		if rejected(err) {
			err = explainRejection(err, members[0], req, largestOffer(c.fitter.nodes), excluded)
			c.st.constrained(p, len(excluded) > 0)
			for _, m := range members {
				c.recorder.Eventf(m, nil, corev1.EventTypeWarning, keys.EventJobRejected, keys.ActionSubmit, "Slurm rejected the placeholder job: %v", err)
			}
			return finish(err, true, "", members)
		}
		if !refusedNow(err) {
			// No answer from Slurm itself (cut, timed out, a proxy's
			// error): the job may exist.
			c.st.inDoubt(p)
		}
		c.log.V(2).Info("Submitting a placeholder job failed; retrying", "owner", o.String(), "err", err.Error())
		return finish(err, false, "", members)
	}
	lost := c.st.submitted(p, key, id, now, excluded, c.log)
	c.jobs.Track(id) // held from Slurm's first word on it, no listing needed
	msg := "Slurm job %d holds this pod's place in Slurm's queue"
	if now {
		c.metrics.submissions.WithLabelValues(submitAllocated).Inc()
		msg = "Slurm granted job %d at once (an allocation; no wait in the queue)"
		// It runs already: read where, so the pods bind now.
		if j, err := c.slurm.GetJob(ctx, id); err == nil {
			c.observe(*j)
		} else {
			c.st.starting(id) // the watch reads it
		}
	} else {
		c.metrics.submissions.WithLabelValues(submitSubmitted).Inc()
		// Gated while the ask was in flight: a cycle now says it waits
		// in Slurm's queue.
		defer c.activate(members)
	}
	if lost != "" {
		c.lifeQ.Add(lost)
	}
	c.log.V(2).Info("Submitted a placeholder job", "owner", o.String(), "job", id, "allocatedAtOnce", now)
	for _, m := range members {
		c.recorder.Eventf(m, nil, corev1.EventTypeNormal, keys.EventJobSubmitted, keys.ActionSubmit, msg, id)
	}
	// The job id is written on the pods by the lifecycle workers once the
	// job is seen (recordJobID), off this path: a burst's submissions then
	// wait for Slurm alone, not for an API server write each.
	c.lifeQ.Add(key)
	// Queued: the watch wakes the pods once Slurm says where the job runs.
	return nil
}

// place asks Slurm for the owner's job (as the Slurm user ctx names:
// slurmrest.AsUser). With ImmediateAllocation, first an
// allocation Slurm grants inside the request when it can place the job now
// and it is the top-priority job (now is true); when Slurm refuses for now,
// a batch placeholder in the queue, so priorities, QOS, fairshare and
// limits decide as for any job. Refused for what it asks (an invalid QOS,
// more GPUs than a node has), the refusal is the answer. An allocation request that got no answer is not followed
// by a batch job: Slurm may have granted it. It is asked again after
// backoff, and the cache adopts a granted allocation by its comment
// meanwhile (a duplicate is cancelled, the older job kept).
func (c *submitter) place(ctx context.Context, o owner, j slurmrest.JobSubmit) (id uint32, now bool, err error) {
	if c.args.ImmediateAllocation && c.st.mayAllocateNow(j.Partition) {
		id, err := c.slurm.AllocateNow(ctx, j)
		switch {
		case err == nil:
			return id, true, nil
		case !refusedNow(err):
			return 0, false, fmt.Errorf("asking Slurm for an allocation: %w", err)
		case !notNow(err) && rejected(err):
			// Refused for what it asks: a batch job would be too.
			return 0, false, err
		}
		c.st.refused(j.Partition)
		c.log.V(3).Info("Slurm cannot place the job now; queueing it", "owner", o.String(), "answer", err.Error())
	}
	j.Script = c.script(o)
	id, err = c.slurm.SubmitJob(ctx, j)
	return id, false, err
}

// allocRetry: after Slurm refused an immediate allocation in a partition,
// pods of that partition go straight to the queue for this long.
const allocRetry = 10 * time.Second
