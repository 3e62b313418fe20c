package scheduler

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// resyncEvery re-checks every placement, in case an event was missed.
const resyncEvery = 30 * time.Second

// JobEvents is the cache's side Run needs: its job events and its sync.
type JobEvents interface {
	// KeepJobs says which jobs the cache holds: onepool's placeholders.
	KeepJobs(keep func(*slurmrest.Job) bool)
	AddJobHandler(h slurmrest.JobHandler)
	AddStatusHandler(f func(stale bool))
	Run(ctx context.Context)
	WaitSynced(ctx context.Context) error
}

// PodEventHandler feeds onepool's pods from an informer into the core.
func (c *manager) PodEventHandler() cache.ResourceEventHandler {
	return cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			p, ok := obj.(*corev1.Pod)
			return ok && p.Spec.SchedulerName == keys.SchedulerName
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.podChanged(nil, obj.(*corev1.Pod)) },
			UpdateFunc: func(old, obj any) { c.podChanged(old.(*corev1.Pod), obj.(*corev1.Pod)) },
			DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				c.podDeleted(obj.(*corev1.Pod))
			},
		},
	}
}

// Listen opens the release endpoint's socket, so a taken port fails start-up.
func (c *manager) Listen() (net.Listener, error) {
	l, err := net.Listen("tcp", c.args.ReleaseListenAddress)
	if err != nil {
		return nil, fmt.Errorf("onepool release endpoint: %w", err)
	}
	return l, nil
}

// Run starts the core once the pod informer has synced: the Slurm cache
// (whose first listing adopts existing placeholder jobs), then the
// workers. It returns when ctx ends and every goroutine has stopped.
func (c *manager) Run(ctx context.Context, podsSynced cache.InformerSynced, jobs JobEvents, l net.Listener) {
	defer c.submitQ.ShutDown()
	defer c.lifeQ.ShutDown()
	defer c.retry.q.ShutDown()
	done := make(chan struct{})
	go func() { defer close(done); c.rel.serve(ctx, l) }()
	defer func() { <-done }()

	select {
	case <-c.leader.Leading():
	default:
		c.log.Info("Standby: Slurm is left alone until this replica holds the scheduler's lease")
		select {
		case <-ctx.Done():
			return
		case <-c.leader.Leading():
		}
		c.log.Info("Leading: reading Slurm's jobs to take over the placements")
	}
	if !cache.WaitForCacheSync(ctx.Done(), podsSynced) {
		return
	}
	if !c.waitForKey(ctx) {
		return
	}
	// Only onepool's placeholders are held: another user's job is never
	// one (observe ignores it), and a queue of 50,000 of them would cost
	// the scheduler their memory and slurmrestd their listings.
	jobs.KeepJobs(func(j *slurmrest.Job) bool { _, ok := c.proof.jobOwner(*j); return ok })
	jobs.AddJobHandler(slurmrest.JobHandler{
		Add:    func(j *slurmrest.Job) { c.book.observe(*j) },
		Update: func(_, j *slurmrest.Job) { c.book.observe(*j) },
		Delete: func(j *slurmrest.Job) { c.book.forget(*j) },
	})
	jobs.AddStatusHandler(func(stale bool) {
		if !stale {
			c.book.requeueAll()
		}
	})
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); jobs.Run(ctx) }()
	defer func() { <-cacheDone }()
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := jobs.WaitSynced(wctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Info("Still waiting for a first listing of Slurm's jobs", "err", err.Error())
	}
	all := c.rec.synced()
	c.log.Info("Read Slurm's jobs; placing pods", "pendingPods", len(all))
	c.activate(all)
	c.book.requeueAll()

	workers := make(chan struct{})
	n := c.args.SubmitWorkers + 4 + 2
	for range c.args.SubmitWorkers {
		go func() { defer func() { workers <- struct{}{} }(); c.sub.run(ctx) }()
	}
	for range 4 {
		go func() { defer func() { workers <- struct{}{} }(); c.life.run(ctx) }()
	}
	go func() { defer func() { workers <- struct{}{} }(); c.watch.run(ctx) }()
	go func() { defer func() { workers <- struct{}{} }(); c.retry.run(ctx) }()
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			c.rec.prune()
			c.book.requeueAll()
		}
	}
	c.submitQ.ShutDown()
	c.lifeQ.ShutDown()
	c.retry.q.ShutDown()
	for range n {
		<-workers
	}
}

// waitForKey loads the placeholder signing key unless the manager has it,
// asking again with backoff until it succeeds or ctx ends: without it no
// job can be told onepool's, so nothing is read or submitted.
func (c *manager) waitForKey(ctx context.Context) bool {
	wait := time.Second
	for c.proof == nil {
		k, err := loadCommentKeys(ctx, c.kube, c.args.PlaceholderKeySecret)
		if err == nil {
			c.proof = k
			break
		}
		c.log.Error(err, "Cannot read the placeholder signing key; Slurm's jobs are not read until it can", "retryIn", wait.String())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
	return true
}
