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
	// NodeSyncedAt is when what Node(name) returns was asked of Slurm: it
	// reflects every change Slurm made to the node before then.
	NodeSyncedAt(name string) time.Time
	// LiveNode asks slurmrestd now, for what cannot be undone.
	LiveNode(ctx context.Context, name string) (slurmrest.Node, error)
	Drain(ctx context.Context, name, reason string) error
	Resume(ctx context.Context, name string) error
}
