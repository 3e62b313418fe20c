package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/keys"
)

// errRetry marks a submission to try again after backoff.
var errRetry = errors.New("retry")

func (c *Core) submitWorker(ctx context.Context) {
	for {
		key, quit := c.submitQ.Get()
		if quit {
			return
		}
		err := c.submit(ctx, key)
		if errors.Is(err, errRetry) && ctx.Err() == nil {
			c.submitQ.AddRateLimited(key)
		} else {
			c.submitQ.Forget(key)
		}
		c.submitQ.Done(key)
	}
}

// submit makes the placeholder job of one owner, once.
func (c *Core) submit(ctx context.Context, key string) error {
	c.mu.Lock()
	p := c.places[key]
	if p == nil || p.jobID != 0 {
		if p != nil {
			p.submitting = false
		}
		c.mu.Unlock()
		return nil
	}
	o := p.owner
	members := c.membersLocked(o)
	stale := c.jobs.Stale()
	c.mu.Unlock()

	// finish records the outcome and wakes the pods so their message
	// says it; a failure that passes is retried after backoff.
	finish := func(err error, rejected bool, waiting string, members []*corev1.Pod) error {
		c.mu.Lock()
		p.submitting = waiting == "" && err != nil && !rejected
		p.err, p.rejected, p.waiting = err, rejected, waiting
		if err != nil {
			p.errAt = time.Now()
		}
		c.mu.Unlock()
		c.activate(members)
		if p.submitting {
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
	nodes := 1
	if o.Group {
		min, err := c.groups.MinMember(ctx, o.Namespace, o.Name)
		if err != nil {
			return finish(nil, false, fmt.Sprintf("waiting for %s: %v", o, err), members)
		}
		if len(members) < min {
			return finish(nil, false, fmt.Sprintf("waiting for %s: %d of its %d pods exist", o, len(members), min), members)
		}
		nodes, members = min, members[:min]
	}
	req, err := requestFor(members[0], c.args)
	if err != nil {
		return finish(err, true, "", members)
	}
	for _, m := range members[1:] {
		r, err := requestFor(m, c.args)
		if err != nil || !sameShape(req, r) {
			return finish(fmt.Errorf("the pods of %s ask different resources or Slurm settings; one job gives every node the same", o), true, "", members)
		}
	}
	id, err := c.slurm.SubmitJob(ctx, jobFor(o, req, nodes, c.args, c.script(o)))
	if err != nil {
		if rejected(err) {
			err = explainRejection(err, members[0], req, largestOffer(c.nodes))
			for _, m := range members {
				c.recorder.Eventf(m, nil, corev1.EventTypeWarning, keys.EventJobRejected, "Submit", "Slurm rejected the placeholder job: %v", err)
			}
			return finish(err, true, "", members)
		}
		c.log.V(2).Info("Submitting a placeholder job failed; retrying", "owner", o.String(), "err", err.Error())
		return finish(err, false, "", members)
	}
	c.mu.Lock()
	if p.jobID == 0 { // the cache may have reported it already
		p.jobID = id
		c.byJob[id] = key
	}
	p.submitting, p.err, p.rejected, p.waiting = false, nil, false, ""
	p.submitted = time.Now()
	c.starting[id] = time.Now()
	c.mu.Unlock()
	c.log.V(2).Info("Submitted a placeholder job", "owner", o.String(), "job", id)
	for _, m := range members {
		c.recorder.Eventf(m, nil, corev1.EventTypeNormal, keys.EventJobSubmitted, "Submit", "Slurm job %d holds this pod's place in Slurm's queue", id)
		if err := annotateJobID(ctx, c.kube.CoreV1().Pods(m.Namespace), m, id); err != nil {
			c.log.Error(err, "Recording the job id on the pod", "pod", m.Namespace+"/"+m.Name, "job", id)
		}
	}
	// The start poller wakes the pods once Slurm says where the job runs.
	return nil
}
