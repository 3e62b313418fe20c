package slurmrest

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// fresh says why the view of kind cannot be trusted now, or nil: the kind
// is not watched, or a watched kind is not synced or too old (the cache is
// fresh or stale as a whole). Callers hold c.mu.
func (c *Cache) freshLocked(now time.Time, kind Watch) error {
	if c.cfg.Watch&kind == 0 {
		return ErrNotWatched
	}
	if (c.cfg.Watch&WatchNodes != 0 && !c.nodes.synced) || (c.cfg.Watch&WatchJobs != 0 && !c.jobs.synced) {
		return fmt.Errorf("%w: not synced yet", ErrStale)
	}
	oldest := c.oldestSyncLocked()
	if age := now.Sub(oldest); age > c.cfg.StaleAfter {
		return fmt.Errorf("%w: last good refresh %s ago", ErrStale, age.Round(time.Second))
	}
	return nil
}

// Node returns the cached node. ErrNotFound means Slurm has no such node;
// ErrStale means the answer is unknown. The node is followed from now on
// (NodeFollow): a node the cache was not following, and whose last read
// is StaleAfter old (the table is asked only every NodeListEvery then),
// answers ErrStale until the next poll has read it.
func (c *Cache) Node(name string) (Node, error) {
	now := time.Now()
	c.want(name, now)
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.freshLocked(now, WatchNodes); err != nil {
		return Node{}, err
	}
	if age := now.Sub(c.nodeAsOfLocked(name)); age > c.cfg.StaleAfter {
		return Node{}, fmt.Errorf("%w: node %s last read %s ago; followed from now on", ErrStale, name, age.Round(time.Second))
	}
	n, ok := c.nodes.get(name)
	if !ok {
		return Node{}, fmt.Errorf("node %s: %w", name, ErrNotFound)
	}
	return *n, nil
}

// Nodes returns all cached nodes, in no order, or ErrStale. While the
// followed nodes are read by name, the others are as the table's last
// listing had them: at most NodeListEvery old.
func (c *Cache) Nodes() ([]Node, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	now := time.Now()
	if err := c.freshLocked(now, WatchNodes); err != nil {
		return nil, err
	}
	if age := now.Sub(c.tableAsked); age > c.cfg.NodeListEvery+c.cfg.StaleAfter {
		return nil, fmt.Errorf("%w: node table last listed %s ago", ErrStale, age.Round(time.Second))
	}
	return c.nodes.list(), nil
}

// NodeSyncedAt is when what Node(name) answers was asked of Slurm: it
// holds every change Slurm made to the node before then.
func (c *Cache) NodeSyncedAt(name string) time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodeAsOfLocked(name)
}

// Job returns the cached job, like Node.
func (c *Cache) Job(id uint32) (Job, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.freshLocked(time.Now(), WatchJobs); err != nil {
		return Job{}, err
	}
	j, ok := c.jobs.get(id)
	if !ok {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return *j, nil
}

// Jobs returns all cached jobs, in no order, or ErrStale.
func (c *Cache) Jobs() ([]Job, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.freshLocked(time.Now(), WatchJobs); err != nil {
		return nil, err
	}
	return c.jobs.list(), nil
}

// JobCount is how many jobs the last listing of every job answered, kept
// or not, fresh or not (0 when the cache does not watch jobs): what a
// listing of them costs.
func (c *Cache) JobCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.listed
}

// GetNode reads one node: from the view when it is fresh and has it, else
// from a short-lived LRU of direct reads, else from slurmrestd (then kept in
// the LRU). A stale view is never used; a direct read that fails is an error.
func (c *Cache) GetNode(ctx context.Context, name string) (Node, error) {
	return readThrough(c, c.nodeLRU, name, c.Node, func(ctx context.Context, name string) (*Node, error) {
		return c.client.GetNode(ctx, name)
	}, ctx)
}

// GetJob reads one job like GetNode; it finds jobs the listing no longer holds.
func (c *Cache) GetJob(ctx context.Context, id uint32) (Job, error) {
	return readThrough(c, c.jobLRU, id, c.Job, func(ctx context.Context, id uint32) (*Job, error) {
		return c.client.GetJob(ctx, id)
	}, ctx)
}

func readThrough[K comparable, T any](c *Cache, lru *expirable.LRU[K, T], k K, fromView func(K) (T, error),
	get func(context.Context, K) (*T, error), ctx context.Context) (T, error) {
	if v, err := fromView(k); err == nil {
		return v, nil
	}
	if v, ok := lru.Get(k); ok {
		return v, nil
	}
	got, err := get(ctx, k)
	if err != nil {
		var zero T
		return zero, err
	}
	lru.Add(k, *got)
	return *got, nil
}

// JobStates asks slurmrestd for the states of ids (in batches); jobs Slurm no
// longer knows are absent from the answer.
func (c *Cache) JobStates(ctx context.Context, ids []uint32) ([]JobStateEntry, error) {
	return c.client.JobStates(ctx, ids)
}
