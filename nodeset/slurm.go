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
}

// CachedSlurm reads through the cache and writes through the client.
type CachedSlurm struct {
	Cache  *slurmrest.Cache
	Client *slurmrest.Client
}

func (s CachedSlurm) Node(name string) (slurmrest.Node, error) { return s.Cache.Node(name) }
func (s CachedSlurm) Nodes() ([]slurmrest.Node, error)         { return s.Cache.Nodes() }

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

func (s CachedSlurm) DeleteNode(ctx context.Context, name string) error {
	return s.Client.DeleteNode(ctx, name)
}
