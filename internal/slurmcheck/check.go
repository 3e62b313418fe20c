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

// Finding is one setting Slurm seems to lack, and what goes wrong without it.
type Finding struct {
	Setting string
	Why     string
}

func (f Finding) String() string { return f.Setting + ": " + f.Why }

// ErrUnreadable: slurmrestd did not answer the nodes' listing; nothing
// could be checked.
var ErrUnreadable = errors.New("slurm check: slurmrestd's nodes could not be read")

// Check reads the cluster and returns what it lacks (none: all there).
func Check(ctx context.Context, r Reader) ([]Finding, error) {
	nodes, err := r.ListNodes(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	var out []Finding
	if !anyGPU(nodes.Nodes) {
		out = append(out, Finding{"GresTypes=gpu, and Gres=gpu:<type>:<count> on the GPU nodes",
			fmt.Sprintf("none of Slurm's %d nodes has GPUs (yet: a NodeSet's slurmd registers them at start); pods' GPUs come from Slurm's GRES", len(nodes.Nodes))})
	}
	parts, err := r.ListPartitions(ctx)
	switch {
	case err != nil:
		out = append(out, Finding{"PartitionName=...", "slurmrestd's partitions could not be read: " + err.Error()})
	case len(parts) == 0:
		out = append(out, Finding{"PartitionName=...", "Slurm has no partition: no job, a pod's neither, can run"})
	}
	qos, err := r.ListQOS(ctx)
	if err != nil {
		// slurmrestd without slurmdbd answers its slurmdb endpoints with an error.
		return append(out, Finding{"AccountingStorageType=accounting_storage/slurmdbd, AccountingStorageEnforce=associations,limits,qos",
			"slurmrestd answers no QOS (" + err.Error() + "): tenants' accounts and QOS are not Slurm's to enforce, and nothing is preempted by QOS"}), nil
	}
	if !anyPreempts(qos) {
		names := make([]string, 0, len(qos))
		for _, q := range qos {
			names = append(names, q.Name)
		}
		out = append(out, Finding{"PreemptType=preempt/qos, and Preempt=<lower QOS> on a QOS",
			fmt.Sprintf("no QOS may preempt another (QOS: %s): Slurm preempts no job for a pod, and no pod's job", strings.Join(names, ", "))})
	}
	return out, nil
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
