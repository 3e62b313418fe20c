package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/onepool/onepool/slurmrest"
)

// startWindow: how long after submission a job is asked for its state
// directly; later changes come from the cache.
const startWindow = 10 * time.Second

// pollStarts asks slurmrestd, in one /jobs/state request per tick, for the
// state of jobs submitted moments ago, and reads the allocation of those
// that started, so their pods bind without waiting for the cache's next
// full listing.
func (c *Core) pollStarts(ctx context.Context) {
	t := time.NewTicker(c.args.StartPollInterval.Duration)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		var ids []uint32
		for id, at := range c.starting {
			if time.Since(at) > startWindow {
				delete(c.starting, id)
				continue
			}
			ids = append(ids, id)
		}
		c.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		states, err := c.slurm.JobStates(ctx, ids)
		if err != nil {
			c.log.V(3).Info("Polling new placeholder jobs failed", "err", err.Error())
			continue
		}
		var moved []uint32
		for _, s := range states {
			if s.State.Base() != slurmrest.JobPending {
				moved = append(moved, s.ID)
			}
		}
		c.readJobs(ctx, moved)
	}
}

// readJobs reads jobs in full, a few at a time, and observes them.
func (c *Core) readJobs(ctx context.Context, ids []uint32) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id uint32) {
			defer func() { <-sem; wg.Done() }()
			j, err := c.slurm.GetJob(ctx, id)
			if err != nil {
				c.log.V(3).Info("Reading a started placeholder job failed", "job", id, "err", err.Error())
				return
			}
			c.mu.Lock()
			delete(c.starting, id)
			c.mu.Unlock()
			c.observe(*j)
		}(id)
	}
	wg.Wait()
}
