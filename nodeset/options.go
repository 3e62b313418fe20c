package nodeset

import (
	"errors"
	"fmt"
	"time"
)

// Options tune the NodeSet controller. Zero values take the defaults.
type Options struct {
	// Workers bounds the pod creations and deletions one reconcile runs at
	// once (16).
	Workers int
	// CreateBatch bounds the pods one reconcile creates (64): a NodeSet
	// over thousands of Nodes converges in short reconciles, each with its
	// status written, instead of one long one.
	CreateBatch int
	// Recheck is how soon a NodeSet that waits (jobs still running, Slurm
	// unknown, slurmd not registered) is looked at again without an event (10s).
	Recheck time.Duration
	// DefaultDrainTimeout applies when a NodeSet sets none (24h).
	DefaultDrainTimeout time.Duration
	// ShareCheck is how often each Node's share for Slurm is counted again
	// against what its slurmd registered with (1m; negative: never).
	ShareCheck time.Duration
}

// Default fills in the defaults.
func (o *Options) Default() {
	if o.Workers == 0 {
		o.Workers = 16
	}
	if o.CreateBatch == 0 {
		o.CreateBatch = 64
	}
	if o.Recheck == 0 {
		o.Recheck = 10 * time.Second
	}
	if o.DefaultDrainTimeout == 0 {
		o.DefaultDrainTimeout = 24 * time.Hour
	}
	if o.ShareCheck == 0 {
		o.ShareCheck = time.Minute
	}
}

// Validate rejects settings that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.Workers < 1 || o.Workers > 256 {
		errs = append(errs, fmt.Errorf("workers %d: want 1 to 256", o.Workers))
	}
	if o.CreateBatch < 1 {
		errs = append(errs, fmt.Errorf("create batch %d: want at least 1", o.CreateBatch))
	}
	if o.Recheck < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("recheck %s is below 100ms", o.Recheck))
	}
	if o.DefaultDrainTimeout <= 0 {
		errs = append(errs, errors.New("default drain timeout must be positive"))
	}
	return errors.Join(errs...)
}
