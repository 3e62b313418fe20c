package nodeset

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// setNodeLabels sets (or, for "", removes) labels of a Node, as an admin
// or NVIDIA's mig-manager would.
func (e *nodeSetEnv) setNodeLabels(name string, labels map[string]string) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		for k, v := range labels {
			if v == "" {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = v
			}
		}
		return e.c.Update(context.Background(), n)
	}))
}

func (e *nodeSetEnv) nodeLabels(name string) map[string]string {
	e.t.Helper()
	n := &corev1.Node{}
	require.NoError(e.t, e.c.Get(context.Background(), types.NamespacedName{Name: name}, n))
	return n.Labels
}

// A Node asking another MIG layout: drained, its pod kept while a job
// runs and the layout not handed to mig-manager under it; once free the pod
// goes, the layout is handed over (state pending), no pod is made while
// mig-manager works or after it failed; on success the Slurm node record
// goes and a new pod registers the node, whose drain is resumed.
func TestReconcileMIGLayoutChange(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(1, 1)
	node := nodes[0]
	e.setNodeLabels(node, map[string]string{keys.LabelNVIDIAMIGConfig: "all-disabled", keys.LabelNVIDIAMIGConfigState: keys.MIGConfigSuccess})
	e.create(1)
	e.converged(nodes...)
	oldPod := e.pods()[node]
	e.slurm.SetBase(node, "ALLOCATED")

	e.setNodeLabels(node, map[string]string{keys.LabelMIGConfig: "all-1g.10gb"})
	reason := drain.MIGConfigReason("all-1g.10gb")
	testenv.Eventually(t, 30*time.Second, "the node drained for the layout", func() (bool, string) {
		n := e.slurm.Get(node)
		return n.State.Drain() && n.Reason == reason, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
	testenv.Holds(t, 2*time.Second, "while a job runs: the pod stays, the layout is not handed over", func() (bool, string) {
		p, ok := e.pods()[node]
		l := e.nodeLabels(node)
		return ok && p.UID == oldPod.UID && l[keys.LabelNVIDIAMIGConfig] == "all-disabled", fmt.Sprint(podNodes(e.pods()), l)
	})

	deletes := e.slurm.Count(&e.slurm.Deletes)
	e.slurm.SetBase(node, slurmrest.NodeIdle)
	testenv.Eventually(t, 30*time.Second, "free: the pod gone, the layout handed to mig-manager as pending", func() (bool, string) {
		_, ok := e.pods()[node]
		l := e.nodeLabels(node)
		return !ok && l[keys.LabelNVIDIAMIGConfig] == "all-1g.10gb" && l[keys.LabelNVIDIAMIGConfigState] == keys.MIGConfigPending, fmt.Sprint(podNodes(e.pods()), l)
	})
	testenv.Eventually(t, 10*time.Second, "event MIGConfigSet", func() (bool, string) { return e.hasEvent(keys.EventMIGConfigSet, "all-1g.10gb") })
	testenv.Holds(t, 2*time.Second, "no pod while mig-manager works", func() (bool, string) {
		_, ok := e.pods()[node]
		return !ok && e.slurm.Get(node).State.Drain(), fmt.Sprint(podNodes(e.pods()))
	})

	e.setNodeLabels(node, map[string]string{keys.LabelNVIDIAMIGConfigState: keys.MIGConfigFailed})
	testenv.Eventually(t, 10*time.Second, "event MIGConfigFailed", func() (bool, string) { return e.hasEvent(keys.EventMIGConfigFailed, "all-1g.10gb") })
	testenv.Holds(t, 2*time.Second, "no pod after mig-manager failed; the node stays drained", func() (bool, string) {
		_, ok := e.pods()[node]
		n := e.slurm.Get(node)
		return !ok && n.State.Drain() && n.Reason == reason, fmt.Sprint(podNodes(e.pods()), n.State)
	})

	e.setNodeLabels(node, map[string]string{keys.LabelNVIDIAMIGConfigState: keys.MIGConfigSuccess})
	e.converged(nodes...)
	assert.NotEqual(t, oldPod.UID, e.pods()[node].UID, "a new slurmd pod")
	assert.Greater(t, e.slurm.Count(&e.slurm.Deletes), deletes, "the Slurm node record removed, for the new pod to register the new MIG devices")
	assert.Equal(t, "all-1g.10gb", e.nodeLabels(node)[keys.LabelNVIDIAMIGConfig])
}
