package nodeset

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmrest"
)

// status is the NodeSet's status from what this reconcile saw and decided.
func (r *Reconciler) status(ns *v1alpha1.NodeSet, nodes []nodeState, steps []step, hash string) v1alpha1.NodeSetStatus {
	st := v1alpha1.NodeSetStatus{ObservedGeneration: ns.Generation, TemplateHash: hash, Conditions: slices.Clone(ns.Status.Conditions)}
	known := true
	var waiting, stuck []string
	var outside []string
	for i, n := range nodes {
		if n.wanted {
			st.DesiredNodes++
		}
		if n.pod != nil {
			st.Pods++
			if podReady(n.pod) {
				st.ReadyPods++
			}
			if n.pod.Labels[keys.LabelTemplateHash] == hash {
				st.UpdatedPods++
			}
		}
		if !n.slurm.known {
			known = false
		}
		if n.wanted || n.pod != nil {
			countSlurm(&st.Slurm, n)
			if n.slurm.found && !inPartitions(n.slurm.node, ns.Spec.Slurm.Partitions) {
				outside = append(outside, n.slurmName)
			}
		}
		switch s := steps[i]; {
		case s.act == actWait && s.busy && r.timedOut(n.slurmName):
			stuck = append(stuck, n.slurmName)
		case s.act != actNone:
			waiting = append(waiting, fmt.Sprintf("%s: %s", n.slurmName, describe(s)))
		}
	}
	st.Slurm.Known = known
	if !known {
		st.Slurm = ns.Status.Slurm // the last known counts, marked unknown
		st.Slurm.Known = false
	}
	gen := ns.Generation
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if known {
		set(keys.NodeSetSlurmSynced, true, keys.NodeSetReasonSlurmKnown, "Slurm's node states are current")
	} else {
		set(keys.NodeSetSlurmSynced, false, keys.NodeSetReasonSlurmUnknown, "Slurm's state is unknown (slurmrestd unreachable or the cache stale): nothing is drained, deleted or resumed until it is known")
	}
	registered := st.Slurm.Idle + st.Slurm.Allocated + st.Slurm.Drained
	switch {
	case st.ReadyPods < st.DesiredNodes:
		set(keys.NodeSetReady, false, keys.NodeSetReasonPodsNotReady, fmt.Sprintf("%d of %d slurmd pods are Ready", st.ReadyPods, st.DesiredNodes))
	case !known:
		set(keys.NodeSetReady, false, keys.NodeSetReasonSlurmUnknown, "Slurm's state is unknown")
	case st.Slurm.Missing > 0 || st.Slurm.Down > 0:
		set(keys.NodeSetReady, false, keys.NodeSetReasonSlurmNotReady, fmt.Sprintf("%d of %d nodes are registered and up in Slurm", registered, st.DesiredNodes))
	default:
		set(keys.NodeSetReady, true, keys.NodeSetReasonAllReady, fmt.Sprintf("%d slurmd pods Ready and registered in Slurm", st.ReadyPods))
	}
	switch {
	case len(stuck) > 0:
		set(keys.NodeSetProgressing, false, keys.NodeSetReasonDrainTimeout, "drained past the drain timeout and still running jobs: "+listShort(stuck))
	case len(waiting) > 0:
		set(keys.NodeSetProgressing, true, keys.NodeSetReasonWorking, listShort(waiting))
	default:
		set(keys.NodeSetProgressing, false, keys.NodeSetReasonComplete, "every selected Node runs an up-to-date slurmd pod")
	}
	if len(ns.Spec.Slurm.Partitions) > 0 {
		if len(outside) > 0 {
			set(keys.NodeSetSlurmPartitions, false, keys.NodeSetReasonPartitionsWrong,
				fmt.Sprintf("not in every partition of %v (check slurm.conf NodeSet/Feature lines): %s", ns.Spec.Slurm.Partitions, listShort(outside)))
		} else {
			set(keys.NodeSetSlurmPartitions, true, keys.NodeSetReasonPartitionsOK, "every registered node is in its partitions")
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, keys.NodeSetSlurmPartitions)
	}
	return st
}

func countSlurm(c *v1alpha1.SlurmCounts, n nodeState) {
	if !n.slurm.known {
		return
	}
	if !n.slurm.found {
		if n.wanted {
			c.Missing++
		}
		return
	}
	s := n.slurm.node.State
	switch {
	case s.Drain():
		c.Drained++
	case s.Base() == slurmrest.NodeDown || s.Has("NOT_RESPONDING"):
		c.Down++
	case s.Busy():
		c.Allocated++
	default:
		c.Idle++
	}
}

func inPartitions(n slurmrest.Node, want []string) bool {
	for _, p := range want {
		if !slices.Contains(n.Partitions, p) {
			return false
		}
	}
	return true
}

func describe(s step) string {
	switch s.act {
	case actWait:
		return s.why
	case actDrain:
		return "draining (" + s.reason + ")"
	}
	return s.act.String()
}

// listShort keeps a condition message readable on a 500-node NodeSet.
func listShort(items []string) string {
	const max = 5
	if len(items) <= max {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:max], "; "), len(items)-max)
}

func (r *Reconciler) writeStatus(ctx context.Context, ns *v1alpha1.NodeSet, st v1alpha1.NodeSetStatus) error {
	if apiequality.Semantic.DeepEqual(ns.Status, st) {
		return nil
	}
	ns.Status = st
	if err := r.client.Status().Update(ctx, ns); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}
