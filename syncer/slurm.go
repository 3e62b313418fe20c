package syncer

import (
	"context"
	"time"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is what the syncer needs of Slurm: reads from the cache (which says
// ErrStale rather than serve old data) and the two writes.
type Slurm interface {
	// Node returns the node's state, slurmrest.ErrStale when unknown, or
	// slurmrest.ErrNotFound when Slurm has no such node.
	Node(name string) (slurmrest.Node, error)
	// SyncedAt is when the last good refresh of the cache began: what Node
	// returns reflects every change Slurm made before then.
	SyncedAt() time.Time
	// LiveNode asks slurmrestd now, for what cannot be undone.
	LiveNode(ctx context.Context, name string) (slurmrest.Node, error)
	Drain(ctx context.Context, name, reason string) error
	Resume(ctx context.Context, name string) error
}

// CachedSlurm reads through the cache and writes through the client.
type CachedSlurm struct {
	Cache  *slurmrest.Cache
	Client *slurmrest.Client
}

func (s CachedSlurm) Node(name string) (slurmrest.Node, error) { return s.Cache.Node(name) }
func (s CachedSlurm) SyncedAt() time.Time                      { return s.Cache.LastSync() }

func (s CachedSlurm) LiveNode(ctx context.Context, name string) (slurmrest.Node, error) {
	n, err := s.Client.GetNode(ctx, name)
	if err != nil {
		return slurmrest.Node{}, err
	}
	return *n, nil
}

func (s CachedSlurm) Drain(ctx context.Context, name, reason string) error {
	return s.Client.Drain(ctx, name, reason)
}

func (s CachedSlurm) Resume(ctx context.Context, name string) error {
	return s.Client.Resume(ctx, name)
}
