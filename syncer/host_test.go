package syncer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
)

// Nodes whose slurmd runs on the host (an existing Slurm cluster): no
// slurmd pod, the selector names them.

func hostOpts() Options {
	return Options{HostNodes: labels.SelectorFromSet(labels.Set{keys.LabelSlurmdOnHost: "true"})}
}

// hostNode makes a Node for Slurm node slurmName, labelled as a host-slurmd
// Node when host is true.
func (e *syncerEnv) hostNode(slurmName string, host bool) string {
	e.t.Helper()
	l := map[string]string{keys.LabelSlurmNodeName: slurmName}
	if host {
		l[keys.LabelSlurmdOnHost] = "true"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("host-%s-%d", slurmName, time.Now().UnixNano()%1e9), Labels: l}}
	require.NoError(e.t, e.c.Create(context.Background(), node))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
	return node.Name
}

func (e *syncerEnv) label(node, key, value string) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := e.node(node)
		if value == "" {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = value
		}
		return e.c.Update(context.Background(), n)
	}))
}

// A host-slurmd Node: cordon drains with the operator's words and records
// it on the Node; an admin's drain shows on the Node; uncordon resumes
// onepool's drain only.
func TestHostNodeCordonDrainsAndMirrors(t *testing.T) {
	e := newSyncerEnv(t, hostOpts(), "gpu-0", "gpu-1")
	node := e.hostNode("gpu-0", true)
	want, _ := drain.CordonReason("fan swap")

	e.cordon(node, true, "fan swap")
	e.slurmIs("gpu-0", want)
	e.eventually(20*time.Second, "the Node records onepool's drain and says so", func() (bool, string) {
		n := e.node(node)
		c := findCondition(n.Status.Conditions, keys.ConditionSlurmUnavailable)
		return n.Annotations[keys.AnnotationDrainApplied] == want && c != nil && c.Reason == keys.ConditionReasonDrainedByOwner,
			fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	e.eventually(20*time.Second, "a SlurmNodeDrained event on the Node", func() (bool, string) {
		return e.hasEvent("", node, keys.EventDrained, want)
	})
	e.cordon(node, false, "")
	e.slurmIs("gpu-0", "")

	require.NoError(t, e.slurm.Set("gpu-0", true, "disk failing", "root"))
	e.eventually(20*time.Second, "the admin's drain mirrored on the Node", func() (bool, string) {
		n := e.node(node)
		c := findCondition(n.Status.Conditions, keys.ConditionSlurmUnavailable)
		return n.Annotations[keys.AnnotationSlurmReason] == "disk failing" && n.Annotations[keys.AnnotationSlurmBy] == "root" &&
			c != nil && c.Status == corev1.ConditionTrue && c.Reason == keys.ConditionReasonDrained, fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	e.cordon(node, true, "")
	e.cordon(node, false, "")
	e.holds(2*time.Second, "the admin's drain stays", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return n.State.Drain() && n.Reason == "disk failing", fmt.Sprintf("%v %q", n.State, n.Reason)
	})
	assert.Equal(t, 1, e.slurm.Count(&e.slurm.Resumes), "only onepool's own drain was resumed")
}

// Without the label the syncer does nothing for a Node (there is no
// slurmd pod either); a label put on later takes effect, a label taken
// off leaves Slurm as it is.
func TestHostNodeOnlyWhereSelected(t *testing.T) {
	e := newSyncerEnv(t, hostOpts(), "gpu-0")
	node := e.hostNode("gpu-0", false)
	e.cordon(node, true, "")
	e.holds(2*time.Second, "no drain for a Node the selector does not name", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return !n.State.Drain(), fmt.Sprint(n.State)
	})
	e.label(node, keys.LabelSlurmdOnHost, "true")
	e.slurmIs("gpu-0", drain.ReasonCordoned)
	e.label(node, keys.LabelSlurmdOnHost, "")
	e.cordon(node, false, "")
	e.holds(2*time.Second, "onepool's drain stays once the Node is no longer selected", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return n.State.Drain() && n.Reason == drain.ReasonCordoned, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
}

// With no selector (the default) a Node with the label is not acted on.
func TestHostNodeOffByDefault(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-0")
	node := e.hostNode("gpu-0", true)
	e.cordon(node, true, "")
	e.holds(2*time.Second, "no drain without --host-slurmd-nodes", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return !n.State.Drain(), fmt.Sprint(n.State)
	})
}

// Two host Nodes that name one Slurm node: a kubelet that labelled itself
// with another node's Slurm name cannot drain it. Neither is acted on, and
// both say why.
func TestHostNodesNamingOneSlurmNode(t *testing.T) {
	e := newSyncerEnv(t, hostOpts(), "gpu-0")
	a := e.hostNode("gpu-0", true)
	b := e.hostNode("gpu-0", true)
	e.cordon(b, true, "")
	e.eventually(20*time.Second, "SlurmNodeClaimedTwice on the cordoned Node", func() (bool, string) {
		return e.hasEvent("", b, keys.EventSlurmNodeShared, "Node "+a)
	})
	e.holds(2*time.Second, "no drain", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return !n.State.Drain(), fmt.Sprint(n.State)
	})
}

// A slurmd pod serves the Slurm node on another Node: the host Node that
// names it too is refused; on its own Node the pod's path governs.
func TestHostNodeBesideASlurmdPod(t *testing.T) {
	e := newSyncerEnv(t, hostOpts(), "gpu-0", "gpu-1")
	pod := e.nodeWithPod("gpu-0")
	intruder := e.hostNode("gpu-0", true)
	e.cordon(intruder, true, "")
	e.eventually(20*time.Second, "SlurmNodeClaimedTwice on the host Node", func() (bool, string) {
		return e.hasEvent("", intruder, keys.EventSlurmNodeShared, "slurmd pod "+e.ns+"/"+pod.Name)
	})
	e.holds(2*time.Second, "no drain from the host Node", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return !n.State.Drain(), fmt.Sprint(n.State)
	})
	// The pod's own Node labelled too: the pod's path drains, once.
	e.label(pod.Spec.NodeName, keys.LabelSlurmdOnHost, "true")
	e.cordon(pod.Spec.NodeName, true, "")
	e.slurmIs("gpu-0", drain.ReasonCordoned)
	e.cordon(pod.Spec.NodeName, false, "")
	e.slurmIs("gpu-0", "")
}
