package accounting

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/onepool/onepool/slurmrest"
)

// Slurm is what Ensure asks of slurmdbd (slurmrest.Client).
type Slurm interface {
	ListClusters(ctx context.Context) ([]string, error)
	ListQOS(ctx context.Context) ([]slurmrest.QOS, error)
	SetQOS(ctx context.Context, name string, u slurmrest.QOSUpdate) (bool, error)
	ListAssociations(ctx context.Context, cluster string) ([]slurmrest.Association, error)
	AddAccount(ctx context.Context, cluster string, a slurmrest.Account) error
	AddUserAssociation(ctx context.Context, a slurmrest.Association) error
	UpdateAssociation(ctx context.Context, key slurmrest.Association, u slurmrest.AssociationUpdate) error
}

var _ Slurm = (*slurmrest.Client)(nil)

// Options of Ensure.
type Options struct {
	// Poll is how often slurmdbd is asked again while the cluster is not
	// registered or slurmrestd does not answer (5 s).
	Poll time.Duration
	// Log hears what is done, a line each.
	Log io.Writer
}

// Ensure waits until slurmdbd knows want.Cluster (its slurmctld registers
// it; bounded by ctx), makes the changes Plan lists, then reads Slurm again:
// it returns the changes made, and an error when something still differs
// (slurmdbd takes some requests without doing them, or saying so). Run
// again, it changes nothing. want must be Normalized.
func Ensure(ctx context.Context, s Slurm, want Config, o Options) ([]Change, error) {
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := waitCluster(ctx, s, want.Cluster, o); err != nil {
		return nil, err
	}
	have, err := read(ctx, s, want.Cluster)
	if err != nil {
		return nil, err
	}
	changes, err := Plan(want, have)
	if err != nil {
		return nil, err
	}
	var done []Change
	for _, c := range changes {
		if err := apply(ctx, s, want.Cluster, c); err != nil {
			return done, fmt.Errorf("%s: %w", c.Object, err)
		}
		fmt.Fprintln(o.Log, c)
		done = append(done, c)
	}
	if len(done) == 0 {
		return nil, nil
	}
	have, err = read(ctx, s, want.Cluster)
	if err != nil {
		return done, fmt.Errorf("reading Slurm back: %w", err)
	}
	left, err := Plan(want, have)
	if err != nil {
		return done, fmt.Errorf("reading Slurm back: %w", err)
	}
	if len(left) > 0 {
		var lines []string
		for _, c := range left {
			lines = append(lines, c.String()+hint(c))
		}
		return done, fmt.Errorf("slurmdbd took the changes but still differs from the values:\n  %s", strings.Join(lines, "\n  "))
	}
	return done, nil
}

// hint says what usually keeps a change from taking.
func hint(c Change) string {
	switch {
	case c.QOS != nil && c.QOS.Preempt != nil && len(*c.QOS.Preempt) == 0:
		return fmt.Sprintf(" (slurmrestd cannot empty a preempt list on Slurm 24.11 to 26.05: run `sacctmgr modify qos %s set preempt=''` once)", c.QOSName)
	case c.QOS != nil && len(c.QOS.MaxTRESPerUser) > 0:
		return " (slurmdbd ignores a TRES it does not track: is it in slurm.conf's AccountingStorageTRES?)"
	case c.AddAssociation != nil:
		return " (slurmdbd makes no association, and says nothing, for an account or QOS it does not know)"
	}
	return ""
}

func apply(ctx context.Context, s Slurm, cluster string, c Change) error {
	switch {
	case c.QOS != nil:
		_, err := s.SetQOS(ctx, c.QOSName, *c.QOS)
		return err
	case c.Account != nil:
		return s.AddAccount(ctx, cluster, *c.Account)
	case c.AddAssociation != nil:
		return s.AddUserAssociation(ctx, *c.AddAssociation)
	case c.UpdateAssociation != nil:
		return s.UpdateAssociation(ctx, c.AssociationKey, *c.UpdateAssociation)
	}
	return errors.New("empty change")
}

func read(ctx context.Context, s Slurm, cluster string) (State, error) {
	qos, err := s.ListQOS(ctx)
	if err != nil {
		return State{}, err
	}
	assocs, err := s.ListAssociations(ctx, cluster)
	if err != nil {
		return State{}, err
	}
	return State{QOS: qos, Associations: assocs}, nil
}

// waitCluster polls until slurmdbd lists the cluster: before its slurmctld
// first registers there, an association made on it would be made on a
// cluster slurmdbd does not have. A slurmrestd without the slurmdbd
// plugin (404) ends the wait at once.
func waitCluster(ctx context.Context, s Slurm, cluster string, o Options) error {
	var last string
	for {
		clusters, err := s.ListClusters(ctx)
		switch {
		case err == nil && slices.Contains(clusters, cluster):
			return nil
		case errors.Is(err, slurmrest.ErrNotFound):
			return fmt.Errorf("slurmrestd has no slurmdbd endpoints (start it with -s openapi/slurmctld,openapi/slurmdbd): %w", err)
		}
		now := fmt.Sprintf("slurmdbd has no cluster %s yet (it has %s)", cluster, list(clusters))
		if err != nil {
			now = err.Error()
		}
		if now != last {
			fmt.Fprintf(o.Log, "waiting: %s\n", now)
			last = now
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurmdbd never listed cluster %s: %s: %w", cluster, last, ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}
