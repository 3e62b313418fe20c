// Package slurmcheck looks at a live Slurm cluster, through slurmrestd, for
// the settings onepool needs (the README's slurm.conf checklist) and names
// each one it finds missing. slurmrestd serves no slurm.conf, so each check
// reads what the setting shows in: GPU GRES on the nodes, partitions,
// slurmdbd's QOS and which of them preempt.
package slurmcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// Reader is what the checks read.
type Reader interface {
	ListNodes(ctx context.Context, since time.Time) (*model.NodeList, error)
	ListPartitions(ctx context.Context) ([]model.Partition, error)
	ListQOS(ctx context.Context) ([]model.QOS, error)
}

// Finding is one setting Slurm seems to lack (or that could not be
// checked), and what goes wrong without it.
type Finding struct {
	Setting string
	Why     string
}

func (f Finding) String() string { return f.Setting + ": " + f.Why }

// Report is what Check found: Missing, the settings Slurm lacks;
// Unchecked, those this slurmrestd cannot show (nothing is known of them).
type Report struct {
	Missing   []Finding
	Unchecked []Finding
}

// ErrUnreadable means slurmrestd did not answer the nodes' listing; nothing
// could be checked.
var ErrUnreadable = errors.New("slurm check: slurmrestd's nodes could not be read")

const accountingSetting = "AccountingStorageType=accounting_storage/slurmdbd, AccountingStorageEnforce=associations,limits,qos"

// Check reads the cluster and returns what it lacks.
func Check(ctx context.Context, r Reader) (Report, error) {
	var rep Report
	nodes, err := r.ListNodes(ctx, time.Time{})
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	if !anyGPU(nodes.Nodes) {
		rep.Missing = append(rep.Missing, Finding{"GresTypes=gpu, and Gres=gpu:<type>:<count> on the GPU nodes",
			fmt.Sprintf("none of Slurm's %d nodes has GPUs (yet: a NodeSet's slurmd registers them at start); pods' GPUs come from Slurm's GRES", len(nodes.Nodes))})
	}
	parts, err := r.ListPartitions(ctx)
	switch {
	case err != nil:
		rep.Missing = append(rep.Missing, Finding{"PartitionName=...", "slurmrestd's partitions could not be read: " + err.Error()})
	case len(parts) == 0:
		rep.Missing = append(rep.Missing, Finding{"PartitionName=...", "Slurm has no partition: no job, a pod's neither, can run"})
	}
	qos, err := r.ListQOS(ctx)
	switch {
	case errors.Is(err, model.ErrNotFound):
		// No /slurmdb/ path at all: this slurmrestd runs without its
		// openapi/slurmdbd plugin (-s openapi/slurmctld). Slurm may well
		// have accounting; it cannot be seen from here.
		rep.Unchecked = append(rep.Unchecked, Finding{accountingSetting + "; PreemptType=preempt/qos",
			"this slurmrestd serves no /slurmdb/ endpoints (run it with -s openapi/slurmctld,openapi/slurmdbd to check them): accounting and QOS preemption were not checked"})
		return rep, nil
	case err != nil:
		// The endpoints are there, slurmdbd's answer is not.
		rep.Missing = append(rep.Missing, Finding{accountingSetting,
			"slurmrestd answers no QOS (" + err.Error() + "): tenants' accounts and QOS are not Slurm's to enforce, and nothing is preempted by QOS"})
		return rep, nil
	}
	if !anyPreempts(qos) {
		names := make([]string, 0, len(qos))
		for _, q := range qos {
			names = append(names, q.Name)
		}
		rep.Missing = append(rep.Missing, Finding{"PreemptType=preempt/qos, and Preempt=<lower QOS> on a QOS",
			fmt.Sprintf("no QOS may preempt another (QOS: %s): Slurm preempts no job for a pod, and no pod's job", strings.Join(names, ", "))})
	}
	return rep, nil
}

func anyGPU(nodes []model.Node) bool {
	for _, n := range nodes {
		for _, g := range strings.Split(n.Gres, ",") {
			if g == "gpu" || strings.HasPrefix(g, "gpu:") {
				return true
			}
		}
	}
	return false
}

func anyPreempts(qos []model.QOS) bool {
	for _, q := range qos {
		if len(q.Preempt) > 0 {
			return true
		}
	}
	return false
}
