package slurmrest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// following says whether polls follow the kept jobs by id instead of
// listing: FollowJobs, once the first listing is in.
func (c *Cache) following() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cfg.FollowJobs && c.jobs.synced
}

// followJobs is a poll under FollowJobs: the states of the kept and
// tracked jobs in one /jobs/state request (batched), then a full read of
// each job whose state moved, that Slurm no longer lists, that a Track
// named and Slurm now lists, or that pends and was last read JobListEvery
// ago (its reason changes, its state does not). A job Slurm denies knowing in
// missesBeforeDelete polls in a row is deleted; any other failed read
// leaves the view as it was and fails the poll.
func (c *Cache) followJobs(ctx context.Context) error {
	c.mu.Lock()
	now := time.Now()
	known := make(map[uint32]JobState, len(c.jobs.items)+len(c.tracked))
	var due []uint32 // pending jobs whose record (reason) is JobListEvery old
	for id, j := range c.jobs.items {
		known[id] = j.State
		at, ok := c.readAt[id]
		if !ok {
			at = c.lastJobList
		}
		if c.cfg.JobListEvery > 0 && j.State.Base() == JobPending && now.Sub(at) >= c.cfg.JobListEvery {
			due = append(due, id)
		}
	}
	for id, at := range c.tracked {
		if _, ok := c.jobs.items[id]; ok || now.Sub(at) > trackFor {
			delete(c.tracked, id)
			continue
		}
		known[id] = nil
	}
	c.mu.Unlock()
	if len(known) == 0 {
		return c.client.Ping(ctx)
	}
	states, err := c.client.JobStates(ctx, slices.Sorted(maps.Keys(known)))
	if err != nil {
		return err
	}
	read := readList(known, states)
	for _, id := range due {
		if !slices.Contains(read, id) {
			read = append(read, id)
		}
	}
	jobs, gone, err := readEach(ctx, "job", read, c.client.GetJob)
	if err != nil {
		return err
	}
	c.mu.Lock()
	evs := c.jobs.follow(jobs, gone, c.keep)
	for _, j := range jobs {
		delete(c.tracked, j.ID)
		c.readAt[j.ID] = now
	}
	for id := range c.readAt {
		if _, ok := c.jobs.items[id]; !ok {
			delete(c.readAt, id)
		}
	}
	c.mu.Unlock()
	for _, e := range evs {
		c.client.metrics.cacheEvents.WithLabelValues("job", e.typ).Inc()
		c.deliverJob(e)
	}
	return nil
}

// readList is what a follow poll reads in full: the held jobs whose state
// moved or that states lacks, and the tracked ones (nil state) it lists.
func readList(known map[uint32]JobState, states []JobStateEntry) []uint32 {
	listed := make(map[uint32]JobState, len(states))
	for _, s := range states {
		listed[s.ID] = s.State
	}
	var out []uint32
	for id, k := range known {
		s, ok := listed[id]
		switch {
		case k == nil && ok, k != nil && (!ok || !slices.Equal(k, s)):
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// readEach reads keys one by one, a few at a time: the objects Slurm has
// and the keys it denies knowing (ErrNotFound). Any other failure is the
// poll's error; what was read stands.
func readEach[K comparable, T any](ctx context.Context, what string, keys []K, get func(context.Context, K) (*T, error)) ([]T, []K, error) {
	var (
		mu   sync.Mutex
		objs []T
		gone []K
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func(k K) {
			defer func() { <-sem; wg.Done() }()
			o, err := get(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrNotFound):
				gone = append(gone, k)
			case err != nil:
				errs = append(errs, fmt.Errorf("follow %s %v: %w", what, k, err))
			default:
				objs = append(objs, *o)
			}
		}(k)
	}
	wg.Wait()
	return objs, gone, errors.Join(errs...)
}

// backoff spaces attempts after failures: PollInterval doubled per failure
// in a row, up to maxListBackoff.
type backoff struct {
	failures int
	next     time.Time
}

// until is how long to wait at now before the next attempt.
func (b *backoff) until(now time.Time) time.Duration {
	return max(0, b.next.Sub(now))
}

// done records an attempt begun at now.
func (b *backoff) done(ok bool, now time.Time, base time.Duration) {
	if ok {
		*b = backoff{}
		return
	}
	b.failures++
	wait := maxListBackoff
	if b.failures < 16 {
		wait = min(maxListBackoff, base<<(b.failures-1))
	}
	b.next = now.Add(wait)
}
