// Package fakeslurm is Slurm's node table behind the narrow interfaces the
// controllers read and write Slurm through, for their envtest suites.
package fakeslurm

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is the node table. Writes made as user "slurm" are onepool's and
// counted; an admin's are made with Set and another user.
type Slurm struct {
	mu    sync.Mutex
	nodes map[string]slurmrest.Node
	stale bool
	// refuse: drain requests fail (slurmctld down behind a slurmrestd
	// whose node listing the controllers still have).
	refuse  bool
	Drains  int
	Resumes int
	Deletes int

	nodeHandlers []slurmrest.NodeHandler
	statusFuncs  []func(stale bool)
}

// AddNodeHandler registers a handler: as the Slurm cache, it hears of every node change (as
// an Update; a deletion as Delete).
func (f *Slurm) AddNodeHandler(h slurmrest.NodeHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeHandlers = append(f.nodeHandlers, h)
}

// AddStatusHandler registers a handler: as the Slurm cache, it hears when the table turns
// stale and fresh again.
func (f *Slurm) AddStatusHandler(fn func(stale bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusFuncs = append(f.statusFuncs, fn)
}

// notify tells the handlers of a change to the node; called without the lock.
func (f *Slurm) notify(name string) {
	f.mu.Lock()
	n, ok := f.nodes[name]
	hs := slices.Clone(f.nodeHandlers)
	f.mu.Unlock()
	for _, h := range hs {
		switch {
		case !ok && h.Delete != nil:
			h.Delete(&slurmrest.Node{Name: name})
		case ok && h.Update != nil:
			h.Update(&n, &n)
		}
	}
}

// New has the named nodes IDLE.
func New(names ...string) *Slurm {
	f := &Slurm{nodes: map[string]slurmrest.Node{}}
	for _, n := range names {
		f.Add(slurmrest.Node{Name: n, State: slurmrest.NodeState{slurmrest.NodeIdle}})
	}
	return f
}

// Add registers (or replaces) a node, as slurmd -Z would.
func (f *Slurm) Add(n slurmrest.Node) {
	defer f.notify(n.Name)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[n.Name] = n
}

// Has says whether Slurm knows the node.
func (f *Slurm) Has(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.nodes[name]
	return ok
}

// Get is the node as Slurm has it (zero when unknown).
func (f *Slurm) Get(name string) slurmrest.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[name]
}

// SetBase sets the node's base state (IDLE, ALLOCATED, DOWN), keeping its flags.
func (f *Slurm) SetBase(name, base string) {
	defer f.notify(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[name]
	st := slurmrest.NodeState{base}
	if n.State.Drain() {
		st = append(st, "DRAIN")
	}
	n.State = st
	f.nodes[name] = n
}

// SetStale makes every read answer slurmrest.ErrStale (and writes fail), as
// a cache that lost slurmrestd would.
func (f *Slurm) SetStale(v bool) {
	f.mu.Lock()
	f.stale = v
	fns := slices.Clone(f.statusFuncs)
	f.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}

func (f *Slurm) Node(name string) (slurmrest.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return slurmrest.Node{}, slurmrest.ErrStale
	}
	n, ok := f.nodes[name]
	if !ok {
		return slurmrest.Node{}, slurmrest.ErrNotFound
	}
	return n, nil
}

func (f *Slurm) Nodes() ([]slurmrest.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return nil, slurmrest.ErrStale
	}
	out := make([]slurmrest.Node, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b slurmrest.Node) int { return compare(a.Name, b.Name) })
	return out, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// NodeSyncedAt is now: the table is always current.
func (f *Slurm) NodeSyncedAt(string) time.Time { return time.Now() }

func (f *Slurm) LiveNode(_ context.Context, name string) (slurmrest.Node, error) {
	n, err := f.Node(name)
	if err == slurmrest.ErrStale {
		return n, slurmrest.ErrUnreachable
	}
	return n, err
}

func (f *Slurm) Drain(_ context.Context, name, reason string) error {
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	if refuse {
		return slurmrest.ErrUnreachable
	}
	return f.Set(name, true, reason, "slurm")
}

// RefuseDrains makes onepool's drain requests fail (v true) or work again.
func (f *Slurm) RefuseDrains(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = v
}

func (f *Slurm) Resume(_ context.Context, name string) error { return f.Set(name, false, "", "slurm") }

// SetFeatures sets a node's features, as scontrol update does.
func (f *Slurm) SetFeatures(_ context.Context, name string, features []string) error {
	return f.change(name, func(n *slurmrest.Node) bool {
		n.Features = slices.Clone(features)
		return true
	})
}

func (f *Slurm) DeleteNode(_ context.Context, name string) error {
	return f.change(name, func(*slurmrest.Node) bool {
		f.Deletes++
		return false
	})
}

// change applies fn to a known node as one write to Slurm would: refused
// while Slurm is unreachable, ErrNotFound for an unknown node; the node is
// kept when fn says so, else removed. Handlers hear of it.
func (f *Slurm) change(name string, fn func(*slurmrest.Node) (keep bool)) error {
	defer f.notify(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return slurmrest.ErrUnreachable
	}
	n, ok := f.nodes[name]
	if !ok {
		return slurmrest.ErrNotFound
	}
	if fn(&n) {
		f.nodes[name] = n
	} else {
		delete(f.nodes, name)
	}
	return nil
}

// Set drains (with reason) or resumes a node as user by would: "slurm" is
// onepool's token, anyone else an admin.
func (f *Slurm) Set(name string, drain bool, reason, by string) error {
	defer f.notify(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return slurmrest.ErrUnreachable
	}
	n, ok := f.nodes[name]
	if !ok {
		return slurmrest.ErrNotFound
	}
	st := slurmrest.NodeState{n.State.Base()}
	if drain {
		st = append(st, "DRAIN")
		n.Reason, n.ReasonSetByUser, n.ReasonChanged = reason, by, time.Now().Truncate(time.Second)
		if by == "slurm" {
			f.Drains++
		}
	} else if by == "slurm" {
		f.Resumes++
	}
	n.State = st
	f.nodes[name] = n
	return nil
}

// Count reads one of the write counters under the lock.
func (f *Slurm) Count(c *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *c
}
