package syncer

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Options tune the syncer. Zero values take the defaults.
type Options struct {
	// NotReadyGrace is how long a slurmd pod may be not Ready before its
	// Slurm node is drained (2m).
	NotReadyGrace time.Duration
	// RegisterGrace is how long a new slurmd pod's node may be unknown to
	// Slurm (slurmd starting, registering) before the syncer warns (2m).
	RegisterGrace time.Duration
	// UnknownRetry is how soon a pod is looked at again when Slurm's state
	// is unknown (stale cache, REST error) (2s).
	UnknownRetry time.Duration
	// Resync looks at every slurmd pod again this often even without events (5m).
	Resync time.Duration
	// MaxConcurrentReconciles bounds parallel work (4).
	MaxConcurrentReconciles int
	// HostNodes selects the Nodes whose slurmd runs on the host, not in a
	// slurmd pod (an existing Slurm cluster): their cordon drains their
	// Slurm node and Slurm's state is mirrored on them. nil or empty: none.
	HostNodes labels.Selector
}

// Default fills in the defaults.
func (o *Options) Default() {
	if o.NotReadyGrace == 0 {
		o.NotReadyGrace = 2 * time.Minute
	}
	if o.RegisterGrace == 0 {
		o.RegisterGrace = 2 * time.Minute
	}
	if o.UnknownRetry == 0 {
		o.UnknownRetry = 2 * time.Second
	}
	if o.Resync == 0 {
		o.Resync = 5 * time.Minute
	}
	if o.MaxConcurrentReconciles == 0 {
		o.MaxConcurrentReconciles = 4
	}
}

// Validate rejects settings that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.NotReadyGrace < 0 {
		errs = append(errs, fmt.Errorf("not-ready grace %s is negative", o.NotReadyGrace))
	}
	if o.RegisterGrace < 0 {
		errs = append(errs, fmt.Errorf("register grace %s is negative", o.RegisterGrace))
	}
	if o.UnknownRetry < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("unknown-state retry %s is below 100ms", o.UnknownRetry))
	}
	if o.Resync < time.Second {
		errs = append(errs, fmt.Errorf("resync %s is below 1s", o.Resync))
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, errors.New("max concurrent reconciles must be at least 1"))
	}
	return errors.Join(errs...)
}
