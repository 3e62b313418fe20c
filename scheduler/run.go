package scheduler

import (
	"context"
	"fmt"
	"net"
	"strconv"
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
	AddJobHandler(h slurmrest.JobHandler)
	AddStatusHandler(f func(stale bool))
	Run(ctx context.Context)
	WaitSynced(ctx context.Context) error
}

// PodEventHandler feeds onepool's pods from an informer into the core.
func (c *Core) PodEventHandler() cache.ResourceEventHandler {
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
func (c *Core) Listen() (net.Listener, error) {
	l, err := net.Listen("tcp", c.args.ReleaseListenAddress)
	if err != nil {
		return nil, fmt.Errorf("onepool release endpoint: %w", err)
	}
	return l, nil
}

// Run starts the core once the pod informer has synced: the Slurm cache
// (whose first listing adopts existing placeholder jobs), then the
// workers. It returns when ctx ends and every goroutine has stopped.
func (c *Core) Run(ctx context.Context, podsSynced cache.InformerSynced, jobs JobEvents, l net.Listener) {
	defer c.submitQ.ShutDown()
	defer c.lifeQ.ShutDown()
	done := make(chan struct{})
	go func() { defer close(done); c.serveRelease(ctx, l) }()
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
	jobs.AddJobHandler(slurmrest.JobHandler{
		Add:    func(j *slurmrest.Job) { c.observe(*j) },
		Update: func(_, j *slurmrest.Job) { c.observe(*j) },
		Delete: func(j *slurmrest.Job) { c.forget(*j) },
	})
	jobs.AddStatusHandler(func(stale bool) {
		if !stale {
			c.requeueAll()
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
	c.mu.Lock()
	c.synced = true
	var all []*corev1.Pod
	for _, p := range c.pods {
		if p.Spec.NodeName == "" {
			all = append(all, p)
		}
	}
	c.mu.Unlock()
	c.log.Info("Read Slurm's jobs; placing pods", "pendingPods", len(all))
	c.activate(all)
	c.requeueAll()

	workers := make(chan struct{})
	n := c.args.SubmitWorkers + 4 + 1
	for range c.args.SubmitWorkers {
		go func() { defer func() { workers <- struct{}{} }(); c.submitWorker(ctx) }()
	}
	for range 4 {
		go func() { defer func() { workers <- struct{}{} }(); c.lifecycleWorker(ctx) }()
	}
	go func() { defer func() { workers <- struct{}{} }(); c.watchOwned(ctx) }()
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			c.pruneReleased()
			c.requeueAll()
		}
	}
	c.submitQ.ShutDown()
	c.lifeQ.ShutDown()
	for range n {
		<-workers
	}
}

// requeueAll reconciles every placement, and every bound pod's recorded
// job (an orphan pod whose job Slurm no longer has).
func (c *Core) requeueAll() {
	c.mu.Lock()
	c.adoptRecordedLocked()
	all := make([]string, 0, len(c.places))
	for k := range c.places {
		all = append(all, k)
	}
	c.mu.Unlock()
	for _, k := range all {
		c.lifeQ.Add(k)
	}
}

// adoptRecordedLocked gives a pod that records a job id (written when the
// job was submitted) a placement for that job if none exists: when Slurm
// no longer knows the job, the pod is an orphan and reconcile evicts it.
func (c *Core) adoptRecordedLocked() {
	for _, pod := range c.pods {
		v, ok := pod.Annotations[keys.AnnotationJobID]
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(v, 10, 32)
		if err != nil || id == 0 {
			continue
		}
		o := ownerOf(pod)
		p := c.places[o.key()]
		if p == nil {
			p = newPlacement(o)
			c.places[o.key()] = p
		}
		if p.jobID == 0 && !p.submitting {
			p.jobID = uint32(id)
			c.byJob[p.jobID] = o.key()
		}
	}
}
