package nodeset

import (
	"context"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is what the NodeSet controller needs of Slurm: cached reads (which
// say slurmrest.ErrStale rather than serve old data), one live read for the
// last check before a pod or node record goes, and three writes.
type Slurm interface {
	// Node is the cached node, slurmrest.ErrStale or slurmrest.ErrNotFound.
	Node(name string) (slurmrest.Node, error)
	// Nodes lists the cached nodes, or slurmrest.ErrStale.
	Nodes() ([]slurmrest.Node, error)
	// LiveNode asks slurmrestd now.
	LiveNode(ctx context.Context, name string) (slurmrest.Node, error)
	Drain(ctx context.Context, name, reason string) error
	Resume(ctx context.Context, name string) error
	DeleteNode(ctx context.Context, name string) error
	// SetFeatures makes features the node's available and active ones.
	SetFeatures(ctx context.Context, name string, features []string) error
}
