package slurmrest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/golang-lru/v2/expirable"
)

// CacheConfig tunes the cache; zero values take the defaults.
type CacheConfig struct {
	// PollInterval between update_time polls of nodes and jobs (1 s).
	PollInterval time.Duration
	// StaleAfter: when no refresh succeeded for this long the cache is
	// stale and its reads answer ErrStale (30 s).
	StaleAfter time.Duration
	// LRUSize and LRUTTL bound the per-object read-through cache (4096, 5 s).
	LRUSize int
	LRUTTL  time.Duration
	Logger  logr.Logger
	// JobListEvery: with FollowJobs, a pending job held is read in full
	// this often (its reason). Without: when set, a regular poll lists the jobs in full only
	// this often, or when /jobs/state (ids and states alone, a few dozen
	// bytes a job) shows a job that appeared, vanished or changed state
	// since the last listing. On Slurm 24.11 an update_time delta answers
	// every job as soon as one changed, so polls in full each second cost
	// slurmrestd most of its time on a busy cluster. Changes that leave
	// every state alone (a pending job's reason, a preemption's
	// preempt_time) then wait up to this long, or for RefreshJobs, which
	// always lists. Zero: every poll lists.
	JobListEvery time.Duration
	// Watch is what the cache lists: WatchNodes, WatchJobs or both (zero:
	// both). A component lists only what it reads: on Slurm 24.11 a job
	// delta answers every job as soon as one changed, which costs
	// slurmrestd more than everything else onepool asks. Reads of a kind
	// not watched answer ErrNotWatched.
	Watch Watch
	// FollowJobs: after the first listing, jobs are followed by id, never
	// listed again unless RefreshJobs asks: each poll asks /jobs/state for
	// the jobs the view keeps (KeepJobs) and those Track names, and reads
	// in full the ones whose state moved or that Slurm no longer lists.
	// What a poll costs then follows the kept jobs, not the cluster's
	// queue: at 50,000 queued jobs one listing is 228 MB and takes
	// slurmrestd 105 s (Slurm 24.11). With nothing to follow, a poll pings.
	FollowJobs bool
	// NodeFollow: how the nodes read through Node are kept current (auto:
	// by name while they are few next to the table; cache_nodes.go).
	NodeFollow NodeFollow
	// NodeListEvery: while the followed nodes are read by name, the whole
	// table is asked (its update_time delta) this often (5 m): for Nodes
	// and the nodes onepool does not serve, which may then be this late.
	NodeListEvery time.Duration
	// NodeFollowFor: a node read through Node is followed this long after
	// its last read (15 m; beyond the controllers' resyncs, which read
	// every node they serve).
	NodeFollowFor time.Duration
	// JobListPerJob is the time a job listing is given per job the last
	// listing held, beyond the client's request timeout (4 ms: 24.11 took
	// 2.1 ms a job at 50,000 jobs on 2 busy cores). slurmrestd builds an
	// answer a client gave up on to the end, so a listing abandoned and
	// asked again each poll piles up its memory: give it the time it takes.
	JobListPerJob time.Duration
}

// Watch names the kinds a Cache lists.
type Watch uint8

const (
	// WatchNodes lists nodes.
	WatchNodes Watch = 1 << iota
	// WatchJobs lists jobs.
	WatchJobs
	// WatchAll lists both.
	WatchAll = WatchNodes | WatchJobs
)

func (c *CacheConfig) defaults() {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 30 * time.Second
	}
	if c.LRUSize <= 0 {
		c.LRUSize = 4096
	}
	if c.LRUTTL <= 0 {
		c.LRUTTL = 5 * time.Second
	}
	if c.Watch&WatchAll == 0 {
		c.Watch = WatchAll
	}
	if c.JobListPerJob <= 0 {
		c.JobListPerJob = 4 * time.Millisecond
	}
	if c.NodeListEvery <= 0 {
		c.NodeListEvery = 5 * time.Minute
	}
	if c.NodeFollowFor <= 0 {
		c.NodeFollowFor = 15 * time.Minute
	}
}

// maxListBackoff bounds the wait after failed listings of a kind.
const maxListBackoff = 2 * time.Minute

// maxListTime bounds the time one job listing is given.
const maxListTime = 10 * time.Minute

// Handler receives changes of one kind of object. Calls come one at a time
// from the cache's poll loop, in order; a handler must not block (queue
// work instead). Nil funcs are skipped.
type Handler[T any] struct {
	Add    func(obj *T)
	Update func(old, new *T)
	Delete func(obj *T)
}

// NodeHandler receives node changes.
type NodeHandler = Handler[Node]

// JobHandler receives job changes.
type JobHandler = Handler[Job]

// Cache keeps one cluster-wide view of Slurm's nodes and jobs, refreshed by
// polling with update_time so an unchanged cluster costs two tiny requests
// per interval. It fails closed: when refreshing has failed for longer than
// StaleAfter, reads answer ErrStale instead of old data.
type Cache struct {
	client *Client
	cfg    CacheConfig
	log    logr.Logger

	mu           sync.RWMutex
	nodes        *view[string, Node]
	jobs         *view[uint32, Job]
	lastNodeSync time.Time
	lastJobSync  time.Time
	lastJobList  time.Time // the last full job listing (JobListEvery)
	// jobsListed: the last job poll brought jobs (something changed); an
	// unchanged delta is cheaper than any probe, so only after a change
	// does the next poll ask /jobs/state first.
	jobsListed   bool
	stale        bool
	started      time.Time
	nodeHandlers []NodeHandler
	jobHandlers  []JobHandler
	statusFuncs  []func(stale bool)
	synced       chan struct{}
	syncedOnce   sync.Once
	// refresh asks Run for a job listing before its next tick.
	refresh chan struct{}
	// keep is which jobs the view holds (nil: all); listed is how many
	// the last listing answered, kept or not.
	keep   func(*Job) bool
	listed int
	// tracked are ids Track named that the view does not hold yet, with
	// when they were named (FollowJobs).
	tracked map[uint32]time.Time
	// readAt: when a held job was last read in full by id (FollowJobs).
	readAt map[uint32]time.Time
	// jobBackoff spaces job listings after failures.
	jobBackoff backoff

	// Nodes followed by name (cache_nodes.go). wanted (under wmu): when
	// each node was last read through Node. nodeReadAt: when each
	// followed node's last read by name was asked. tableAsked: when the
	// last good ask of the whole table was (its listing or "unchanged").
	wmu          sync.Mutex
	wanted       map[string]time.Time
	nodeReadAt   map[string]time.Time
	tableAsked   time.Time
	tableBusy    bool
	tableBackoff backoff
	// bg: listings running beside the poll loop; Run waits for them.
	bg sync.WaitGroup

	nodeLRU *expirable.LRU[string, Node]
	jobLRU  *expirable.LRU[uint32, Job]
}

// NewCache returns a cache over client; Run starts it.
func NewCache(client *Client, cfg CacheConfig) *Cache {
	cfg.defaults()
	c := &Cache{
		client:     client,
		cfg:        cfg,
		log:        cfg.Logger,
		nodes:      newView(func(n *Node) string { return n.Name }, (*Node).Equal),
		jobs:       newView(func(j *Job) uint32 { return j.ID }, (*Job).Equal),
		synced:     make(chan struct{}),
		refresh:    make(chan struct{}, 1),
		tracked:    map[uint32]time.Time{},
		readAt:     map[uint32]time.Time{},
		wanted:     map[string]time.Time{},
		nodeReadAt: map[string]time.Time{},
		nodeLRU:    expirable.NewLRU[string, Node](cfg.LRUSize, nil, cfg.LRUTTL),
		jobLRU:     expirable.NewLRU[uint32, Job](cfg.LRUSize, nil, cfg.LRUTTL),
	}
	c.nodes.heldNewer = c.heldNewerNode
	return c
}

// AddNodeHandler registers h; call it before Run.
func (c *Cache) AddNodeHandler(h NodeHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodeHandlers = append(c.nodeHandlers, h)
}

// AddJobHandler registers h; call it before Run.
func (c *Cache) AddJobHandler(h JobHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobHandlers = append(c.jobHandlers, h)
}

// KeepJobs makes the view hold only the jobs keep accepts; the others are
// counted (JobCount) and dropped, so the cache's memory follows the jobs
// it keeps. Call it before Run.
func (c *Cache) KeepJobs(keep func(*Job) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep = keep
}

// Track asks the cache to follow job id, one it does not hold yet (a job
// just submitted): with FollowJobs, polls ask its state and add it once
// Slurm lists it and KeepJobs keeps it. An id Slurm never lists is
// dropped after trackFor.
func (c *Cache) Track(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.jobs.items[id]; !ok {
		c.tracked[id] = time.Now()
	}
}

// trackFor is how long Track follows an id Slurm does not list.
const trackFor = time.Minute

// AddStatusHandler registers f, called with true when the cache turns stale
// and with false when it is fresh again.
func (c *Cache) AddStatusHandler(f func(stale bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statusFuncs = append(c.statusFuncs, f)
}

// Run polls until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	c.mu.Lock()
	c.started = time.Now()
	c.mu.Unlock()
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	defer c.bg.Wait()
	// Which REST API both sides speak: said once at start. Without one in
	// common (ErrUnsupportedVersion) every poll fails and the cache never
	// becomes fresh: readiness stays false and nothing is decided.
	if v, err := c.client.APIVersion(ctx); err != nil {
		c.log.Error(err, "slurmrestd: no REST API version yet")
	} else {
		c.log.Info("slurmrestd REST API", "version", v)
	}
	c.poll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.poll(ctx)
		case <-c.refresh:
			c.pollJobs(ctx)
		}
	}
}

// RefreshJobs asks Run for a listing of the jobs changed since the last
// one now, ahead of its next tick, and returns at once: for a caller that
// must see a job's change sooner than PollInterval (the scheduler, while
// it owns running jobs: a preemption shows only in a job's full record).
// Listings stay one at a time; asks made while one waits count once.
func (c *Cache) RefreshJobs() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// WaitSynced blocks until nodes and jobs were listed once, or ctx ends.
func (c *Cache) WaitSynced(ctx context.Context) error {
	select {
	case <-c.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slurmrest cache: not synced: %w", ctx.Err())
	}
}

func (c *Cache) poll(ctx context.Context) {
	now := time.Now()
	var nodeErr, jobErr error
	if c.cfg.Watch&WatchNodes != 0 {
		if nodeErr = c.pollNodes(ctx, now); nodeErr == nil {
			c.setSynced(&c.lastNodeSync, now)
		}
	}
	if c.cfg.Watch&WatchJobs != 0 {
		if c.following() {
			if jobErr = c.followJobs(ctx); jobErr == nil {
				c.setSynced(&c.lastJobSync, now)
			}
		} else if c.jobsUnchanged(ctx, now) {
			c.setSynced(&c.lastJobSync, now)
		} else {
			jobErr = c.listJobs(ctx, now, true)
		}
	}
	c.polled(ctx, errors.Join(nodeErr, jobErr))
}

// jobsUnchanged says, between the full listings JobListEvery asks for and
// after a poll that brought jobs, whether /jobs/state shows exactly the
// jobs and states of the view: then the listing is skipped. Any doubt (a
// failed probe, another set of jobs) lists.
func (c *Cache) jobsUnchanged(ctx context.Context, now time.Time) bool {
	c.mu.RLock()
	due := c.cfg.JobListEvery <= 0 || !c.jobs.synced || !c.jobsListed || now.Sub(c.lastJobList) >= c.cfg.JobListEvery
	c.mu.RUnlock()
	if due {
		return false
	}
	states, err := c.client.AllJobStates(ctx)
	if err != nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sameStates(c.jobs.items, states)
}

// sameStates says whether states lists exactly the jobs of items, each in
// the state items holds.
func sameStates(items map[uint32]*Job, states []JobStateEntry) bool {
	if len(items) != len(states) {
		return false
	}
	for _, s := range states {
		j, ok := items[s.ID]
		if !ok || !slices.Equal(j.State, s.State) {
			return false
		}
	}
	return true
}

// pollJobs lists the jobs alone (RefreshJobs): changes, never deletions.
func (c *Cache) pollJobs(ctx context.Context) {
	if c.cfg.Watch&WatchJobs == 0 {
		return
	}
	c.polled(ctx, c.listJobs(ctx, time.Now(), false))
}

// listJobs lists the jobs changed since the last listing (all of them the
// first time, given maxListTime), given the time a listing of the jobs
// last counted takes (doubled per failure in a row), and at most one each backoff after a
// failure: slurmrestd finishes an abandoned answer anyway, so asking again
// at each poll would pile them up.
func (c *Cache) listJobs(ctx context.Context, now time.Time, full bool) error {
	c.mu.RLock()
	wait, whole := c.jobBackoff.until(now), c.jobs.since.IsZero()
	c.mu.RUnlock()
	if wait > 0 {
		return fmt.Errorf("list jobs: waiting %s after failed listings", wait.Round(time.Second))
	}
	// A listing of every job (the first) is given maxListTime: its size
	// is unknown, and cut short it would be asked again while slurmrestd
	// still builds the answer abandoned. Other listings are given the
	// time the last whole one's count takes, doubled per failure in a
	// row (the queue may have grown since).
	within := maxListTime
	if !whole {
		c.mu.RLock()
		within = min(maxListTime, (c.client.timeout+time.Duration(c.listed)*c.cfg.JobListPerJob)<<min(c.jobBackoff.failures, 8))
		c.mu.RUnlock()
	}
	lctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	list := func(ctx context.Context, since time.Time) (*JobList, error) {
		return c.client.backend.ListJobs(ctx, since, c.keep)
	}
	listed, err := pollView(lctx, c, "job", c.jobs, full, list,
		func(l *JobList) ([]Job, time.Time) { c.counted(l.Listed, whole); return l.Jobs, l.LastUpdate }, c.deliverJob)
	c.mu.Lock()
	c.jobBackoff.done(err == nil && ctx.Err() == nil, now, c.cfg.PollInterval)
	if err == nil {
		c.jobsListed = listed
		c.lastJobList = now
	}
	c.mu.Unlock()
	if err == nil {
		c.setSynced(&c.lastJobSync, now)
	}
	return err
}

// counted notes how many jobs a listing held (whole: of every job): the
// time later listings are given follows it.
func (c *Cache) counted(n int, whole bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if whole || n > c.listed {
		c.listed = n
	}
}

// JobsListedAt is when the last job listing that succeeded began: every
// job Slurm held then has been seen (zero: none yet). With FollowJobs the
// polls in between see only the jobs followed.
func (c *Cache) JobsListedAt() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lastJobList
}

func (c *Cache) polled(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		c.log.V(1).Info("slurmrest cache refresh failed", "error", err.Error())
	}
	c.updateStatus(time.Now())
}

// pollView lists one kind with update_time and delivers the changes;
// deletions only when full (a regular poll, not a refresh).
func pollView[K comparable, T, L any](ctx context.Context, c *Cache, kind string, v *view[K, T], full bool,
	list func(context.Context, time.Time) (*L, error), items func(*L) ([]T, time.Time), deliver func(event[T])) (listed bool, err error) {
	c.mu.RLock()
	since := v.since
	c.mu.RUnlock()
	// When the request left: the listing reflects Slurm no earlier than this.
	asked := time.Now()
	got, err := list(ctx, since)
	if err != nil {
		return false, err
	}
	if got == nil { // nothing changed since "since"
		return false, nil
	}
	objs, lastUpdate := items(got)
	c.mu.Lock()
	apply := v.applyChanges
	if full {
		apply = v.apply
	}
	evs := apply(objs, lastUpdate, asked)
	c.mu.Unlock()
	for _, e := range evs {
		c.client.metrics.cacheEvents.WithLabelValues(kind, e.typ).Inc()
		deliver(e)
	}
	return true, nil
}

func (c *Cache) deliverNode(e event[Node]) {
	c.nodeLRU.Remove(nodeName(e.old, e.new))
	c.mu.RLock()
	hs := c.nodeHandlers
	c.mu.RUnlock()
	dispatch(hs, e)
}

func (c *Cache) deliverJob(e event[Job]) {
	c.jobLRU.Remove(jobID(e.old, e.new))
	c.mu.RLock()
	hs := c.jobHandlers
	c.mu.RUnlock()
	dispatch(hs, e)
}

func dispatch[T any](hs []Handler[T], e event[T]) {
	for _, h := range hs {
		switch {
		case e.typ == "add" && h.Add != nil:
			h.Add(e.new)
		case e.typ == "update" && h.Update != nil:
			h.Update(e.old, e.new)
		case e.typ == "delete" && h.Delete != nil:
			h.Delete(e.old)
		}
	}
}

func nodeName(a, b *Node) string {
	if b != nil {
		return b.Name
	}
	return a.Name
}

func jobID(a, b *Job) uint32 {
	if b != nil {
		return b.ID
	}
	return a.ID
}

func (c *Cache) setSynced(last *time.Time, at time.Time) {
	c.mu.Lock()
	*last = at
	all := (c.cfg.Watch&WatchNodes == 0 || c.nodes.synced) && (c.cfg.Watch&WatchJobs == 0 || c.jobs.synced)
	c.mu.Unlock()
	if all {
		c.syncedOnce.Do(func() { close(c.synced) })
	}
}

// oldestSyncLocked is the time of the oldest last good refresh of a
// watched kind; zero when one never succeeded. Callers hold c.mu.
func (c *Cache) oldestSyncLocked() time.Time {
	switch c.cfg.Watch & WatchAll {
	case WatchNodes:
		return c.lastNodeSync
	case WatchJobs:
		return c.lastJobSync
	}
	if c.lastJobSync.Before(c.lastNodeSync) {
		return c.lastJobSync
	}
	return c.lastNodeSync
}

// updateStatus turns the cache stale when a watched kind has not refreshed
// for StaleAfter (counting from Run before the first sync), and fresh again
// once every one has.
func (c *Cache) updateStatus(now time.Time) {
	c.mu.Lock()
	oldest := c.oldestSyncLocked()
	if oldest.IsZero() {
		oldest = c.started
	}
	stale := now.Sub(oldest) > c.cfg.StaleAfter
	changed := stale != c.stale
	c.stale = stale
	fs := c.statusFuncs
	for kind, t := range map[string]time.Time{"node": c.lastNodeSync, "job": c.lastJobSync} { // zero when not watched
		if !t.IsZero() {
			c.client.metrics.lastSyncAge.WithLabelValues(kind).Set(now.Sub(t).Seconds())
		}
	}
	c.mu.Unlock()
	if !changed {
		return
	}
	if stale {
		c.client.metrics.cacheStale.Set(1)
		c.log.Info("slurmrest cache is stale: reads answer unknown until a refresh succeeds", "lastGoodSync", oldest)
	} else {
		c.client.metrics.cacheStale.Set(0)
		c.log.Info("slurmrest cache is fresh again")
	}
	for _, f := range fs {
		f(stale)
	}
}

// Stale says whether the cache's reads answer ErrStale now.
func (c *Cache) Stale() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stale
}

// LastSync is the time of the oldest of the last good refreshes of the
// watched kinds.
func (c *Cache) LastSync() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.oldestSyncLocked()
}
