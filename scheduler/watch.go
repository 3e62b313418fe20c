package scheduler

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/onepool/onepool/slurmrest"
)

// runningRefresh: while onepool owns a running job, its full record is
// read this often (not only at the cache's PollInterval), so a preemption
// (preempt_time, which /jobs/state does not carry) reaches the pod within
// about half a second. Idle clusters are not asked more.
const runningRefresh = 500 * time.Millisecond

// maxRunningReads bounds the running jobs read in full each
// runningRefresh; beyond it they take turns. Reads, never a listing: at
// 50,000 queued jobs one listing takes slurmrestd minutes (issue 38),
// where GET /job/{id} took 7-14 ms (Slurm 24.11, idle slurmrestd). Reads
// go 8 at a time: make bench-scheduler (32 placeholders among about 350
// jobs) measured preempt_to_pod_evicting p99 1,464 and 1,366 ms reading
// one by one, 4,768 ms with listings.
const maxRunningReads = 32

// startWindow: how long after submission a job is asked for its state at
// StartPollInterval; later at WatchInterval, like every live job.
const startWindow = 10 * time.Second

// watcher follows onepool's own jobs by id (issue 38): their states in
// one request per tick, a job whose state moved read in full and handed to
// observe. It reads the store for which jobs are onepool's.
type watcher struct {
	st        watchRecords
	slurm     Slurm
	log       klog.Logger
	startPoll time.Duration // Args.StartPollInterval
	watchAll  time.Duration // Args.WatchInterval
	observe   func(slurmrest.Job)
}

// run asks slurmrestd for the state of the jobs onepool owns, in
// one /jobs/state request per tick: jobs submitted moments ago every
// StartPollInterval, every other live job every WatchInterval. A job whose
// state moved is read in full and observed, so its pods bind, or are
// evicted, without waiting for the cache's next listing. With no live
// onepool job it asks nothing: idle clusters see only the cache's polls.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(w.startPoll)
	defer t.Stop()
	var lastAll, lastRefresh time.Time
	turn := 0 // where the next running reads begin
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		all := time.Since(lastAll) >= w.watchAll
		if all {
			lastAll = time.Now()
		}
		known := w.st.owned(all)
		if len(known) == 0 {
			continue
		}
		var each []uint32
		if running := runningJobs(known); len(running) > 0 && time.Since(lastRefresh) >= runningRefresh {
			// A preemption shows only in the job's full record
			// (preempt_time): read the running jobs one by one.
			lastRefresh = time.Now()
			each, turn = takeTurns(running, turn, maxRunningReads)
		}
		states, err := w.slurm.JobStates(ctx, slices.Sorted(maps.Keys(known)))
		if err != nil {
			w.log.V(3).Info("Asking Slurm for the state of onepool's jobs failed", "jobs", len(known), "err", err.Error())
			states = nil
		}
		moved := movedJobs(known, states)
		for _, id := range each {
			if !slices.Contains(moved, id) {
				moved = append(moved, id)
			}
		}
		w.read(ctx, moved)
	}
}

// takeTurns is at most n of ids from position turn on (wrapping), and
// where the next turn begins: every id is read within len(ids)/n turns.
func takeTurns(ids []uint32, turn, n int) ([]uint32, int) {
	if len(ids) <= n {
		return ids, 0
	}
	turn %= len(ids)
	out := make([]uint32, 0, n)
	for i := range n {
		out = append(out, ids[(turn+i)%len(ids)])
	}
	return out, (turn + n) % len(ids)
}

// movedJobs are the jobs whose state differs from what onepool knows; a
// job not seen yet counts only once it left PENDING (its pending state
// comes with the cache's next listing). Jobs Slurm did not list are left
// to the cache, which tells a purge.
func movedJobs(known map[uint32]slurmrest.JobState, states []slurmrest.JobStateEntry) []uint32 {
	var moved []uint32
	for _, s := range states {
		k, ok := known[s.ID]
		switch {
		case !ok:
		case k == nil && s.State.Base() != slurmrest.JobPending:
			moved = append(moved, s.ID)
		case k != nil && !slices.Equal(k, s.State):
			moved = append(moved, s.ID)
		}
	}
	return moved
}

// read reads jobs in full, a few at a time, and observes them.
func (w *watcher) read(ctx context.Context, ids []uint32) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func(id uint32) {
			defer func() { <-sem; wg.Done() }()
			j, err := w.slurm.GetJob(ctx, id)
			if err != nil {
				w.log.V(3).Info("Reading a placeholder job whose state moved failed", "job", id, "err", err.Error())
				return
			}
			w.observe(*j)
		}(id)
	}
	wg.Wait()
}

// runningJobs are the jobs known to run, in id order.
func runningJobs(known map[uint32]slurmrest.JobState) []uint32 {
	var out []uint32
	for id, s := range known {
		if s != nil && s.Base() == slurmrest.JobRunning {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
