package scheduler

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Leadership tells the core whether this scheduler process holds the
// scheduler's leader lease. kube-scheduler builds every profile's plugins,
// and so every manager, on standby replicas too; only the lease holder may
// submit, cancel, evict or tell a placeholder that its pod is gone.
type Leadership interface {
	// Leading is closed once this process first holds the lease.
	Leading() <-chan struct{}
	// IsLeader: the lease is held and was renewed recently enough that no
	// other replica can have taken it.
	IsLeader() bool
}

// LeaderGate learns leadership from the scheduler's own lease lock: a
// successful Create or Update of the lease record naming this process is
// an acquisition or a renewal. kube-scheduler exits when it loses the
// lease, so a gate never closes again; IsLeader still turns false when the
// last renewal is older than the renew deadline, for the moments between a
// failed renewal and that exit.
type LeaderGate struct {
	mu            sync.Mutex
	renewedAt     time.Time
	forever       bool
	renewDeadline time.Duration
	leading       chan struct{}
	once          sync.Once
	now           func() time.Time
}

// NewLeaderGate returns a gate that is not leading yet.
func NewLeaderGate() *LeaderGate {
	return &LeaderGate{leading: make(chan struct{}), now: time.Now}
}

// Lead makes the gate lead for good: the scheduler runs without leader
// election, so it is the only replica.
func (g *LeaderGate) Lead() {
	g.mu.Lock()
	g.forever = true
	g.mu.Unlock()
	g.once.Do(func() { close(g.leading) })
}

// Wrap returns lock, reporting to the gate each write that makes or keeps
// this process the holder. renewDeadline is the elector's: a leader that
// has not renewed for that long gives up.
func (g *LeaderGate) Wrap(lock resourcelock.Interface, renewDeadline time.Duration) resourcelock.Interface {
	g.mu.Lock()
	g.renewDeadline = renewDeadline
	g.mu.Unlock()
	return &gatedLock{Interface: lock, gate: g}
}

func (g *LeaderGate) Leading() <-chan struct{} { return g.leading }

func (g *LeaderGate) IsLeader() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forever {
		return true
	}
	return !g.renewedAt.IsZero() && g.now().Sub(g.renewedAt) < g.renewDeadline
}

// renewed records a write that holds the lease; at is taken before the
// write was sent, so the lease is never thought younger than it is.
func (g *LeaderGate) renewed(at time.Time) {
	g.mu.Lock()
	if at.After(g.renewedAt) {
		g.renewedAt = at
	}
	g.mu.Unlock()
	g.once.Do(func() { close(g.leading) })
}

type gatedLock struct {
	resourcelock.Interface
	gate *LeaderGate
}

func (l *gatedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	at := l.gate.now()
	err := l.Interface.Create(ctx, rec)
	if err == nil && rec.HolderIdentity == l.Identity() {
		l.gate.renewed(at)
	}
	return err
}

func (l *gatedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	at := l.gate.now()
	err := l.Interface.Update(ctx, rec)
	if err == nil && rec.HolderIdentity == l.Identity() {
		l.gate.renewed(at)
	}
	return err
}
