package nodeset

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// One slurmd pod on each selected Node, none elsewhere; the status counts
// them and Slurm's view of their nodes; the busy-node budget exists.
func TestReconcileOnePodPerSelectedNode(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(3, 2)
	e.create(1)
	ns := e.converged(nodes[:2]...)
	assert.Equal(t, slurmrestCounts(2, 0, 0), [3]int32{ns.Status.Slurm.Idle, ns.Status.Slurm.Allocated, ns.Status.Slurm.Drained})
	_, onThird := e.pods()[nodes[2]]
	assert.False(t, onThird, "no pod on the Node the selector leaves out")
	require.NotNil(t, e.pdb(), "the budget that keeps busy slurmd pods")

	e.labelNode(nodes[2], true)
	e.converged(nodes...)
}

func slurmrestCounts(idle, alloc, drained int32) [3]int32 { return [3]int32{idle, alloc, drained} }

// A template change rolls node by node; a node that runs jobs is drained
// and keeps its pod until they end, then is replaced and resumed.
func TestReconcileRollsWithoutTakingABusyNode(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(2, 2)
	e.create(1)
	old := e.converged(nodes...).Status.TemplateHash
	busy := nodes[0]
	e.slurm.SetBase(busy, "ALLOCATED")
	oldPod := e.pods()[busy]

	// The controller writes the NodeSet's status as Slurm changes: on a
	// conflict, read it again.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns := e.get()
		ns.Spec.Template.Annotations = map[string]string{"rev": "2"}
		return e.c.Update(context.Background(), ns)
	}))

	testenv.Eventually(t, 30*time.Second, "the busy node drained for the update", func() (bool, string) {
		n := e.slurm.Get(busy)
		return n.State.Drain() && n.Reason == drain.ReasonNodeSetUpdate, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
	saved := e.slurm.Get(busy) // the drain as slurmctld saved it
	testenv.Holds(t, 2*time.Second, "its pod stays while jobs run", func() (bool, string) {
		p, ok := e.pods()[busy]
		return ok && p.UID == oldPod.UID, fmt.Sprint(podNodes(e.pods()))
	})
	testenv.Eventually(t, 30*time.Second, "its pod carries the busy label (the budget keeps it)", func() (bool, string) {
		p := e.pods()[busy]
		return p.Labels[keys.LabelSlurmBusy] == "true", fmt.Sprint(p.Labels)
	})
	e.slurm.SetBase(busy, slurmrest.NodeIdle)
	ns := e.converged(nodes...)
	assert.NotEqual(t, old, ns.Status.TemplateHash)
	assert.GreaterOrEqual(t, e.slurm.Count(&e.slurm.Deletes), 2, "each replaced node's record removed, for its new pod to register it afresh")

	// slurmctld restarted before saving its state brings the update's
	// drain back (its words and time; slurmd registers again): the
	// NodeSet resumes it again.
	resumes := e.slurm.Count(&e.slurm.Resumes)
	back := e.slurm.Get(busy)
	back.State = slurmrest.NodeState{back.State.Base(), "DRAIN"}
	back.Reason, back.ReasonChanged, back.ReasonSetByUser = saved.Reason, saved.ReasonChanged, saved.ReasonSetByUser
	e.slurm.Add(back)
	testenv.Eventually(t, 30*time.Second, "the drain that came back resumed", func() (bool, string) {
		n := e.slurm.Get(busy)
		return !n.State.Drain() && e.slurm.Count(&e.slurm.Resumes) > resumes, fmt.Sprintf("%v %q", n.State, n.Reason)
	})

	// The record kept is pinned to Slurm's time for that drain: an admin's
	// drain in the update's words, seconds later, is the admin's.
	var node corev1.Node
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKey{Name: busy}, &node))
	rec := drain.Read(node.Annotations, keys.AnnotationNodeSetDrain, keys.AnnotationNodeSetDrainAt)
	assert.True(t, rec.Exact && rec.At.Equal(saved.ReasonChanged.Truncate(time.Second)), "record %+v, Slurm's time %v", rec, saved.ReasonChanged)
	admins := e.slurm.Get(busy)
	admins.State = slurmrest.NodeState{admins.State.Base(), "DRAIN"}
	admins.Reason, admins.ReasonChanged = saved.Reason, saved.ReasonChanged.Add(10*time.Second)
	e.slurm.Add(admins)
	resumes = e.slurm.Count(&e.slurm.Resumes)
	testenv.Holds(t, 3*time.Second, "the admin's drain in the NodeSet's words stays", func() (bool, string) {
		n := e.slurm.Get(busy)
		return n.State.Drain() && e.slurm.Count(&e.slurm.Resumes) == resumes, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
}

// A Node that leaves the selector: drained with the NodeSet's reason, its
// pod deleted once free, and its Slurm node record removed.
func TestReconcileNodeLeaves(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(2, 2)
	e.create(1)
	e.converged(nodes...)
	e.labelNode(nodes[1], false)
	e.converged(nodes[0])
	testenv.Eventually(t, 30*time.Second, "the Slurm node record removed", func() (bool, string) {
		return !e.slurm.Has(nodes[1]), fmt.Sprintf("%+v", e.slurm.Get(nodes[1]))
	})
}

// A pod anyone could make — the slurmd label, bound to the Node that left,
// annotated with its Slurm node — is no slurmd pod: it does not keep the
// Slurm node record of a Node that left the NodeSet.
func TestReconcileNodeLeavesDespiteAPodNoNodeSetOwns(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(2, 2)
	e.create(1)
	e.converged(nodes...)
	ctx := context.Background()
	tenant := e.ns + "-tenant"
	require.NoError(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))
	fake := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fake-slurmd", Namespace: tenant,
			Labels:      map[string]string{keys.LabelComponent: keys.ComponentSlurmd},
			Annotations: map[string]string{keys.AnnotationSlurmNode: nodes[1]}},
		Spec: corev1.PodSpec{NodeName: nodes[1], Containers: []corev1.Container{{Name: "slurmd", Image: "slurmd"}}},
	}
	require.NoError(t, e.c.Create(ctx, fake))
	e.labelNode(nodes[1], false)
	e.converged(nodes[0])
	testenv.Eventually(t, 30*time.Second, "the Slurm node record removed", func() (bool, string) {
		return !e.slurm.Has(nodes[1]), fmt.Sprintf("%+v", e.slurm.Get(nodes[1]))
	})
}

// While Slurm's state is unknown no pod goes and nothing is drained; the
// status says why. Known again, the Node that left is taken away.
func TestReconcileFailsClosedWhileSlurmIsUnknown(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(2, 2)
	e.create(1)
	e.converged(nodes...)
	e.slurm.SetStale(true)
	e.labelNode(nodes[1], false)
	testenv.Eventually(t, 30*time.Second, "the status says Slurm is unknown", func() (bool, string) {
		c := meta.FindStatusCondition(e.get().Status.Conditions, keys.NodeSetSlurmSynced)
		return c != nil && c.Status == "False" && !e.get().Status.Slurm.Known, fmt.Sprintf("%+v", c)
	})
	testenv.Holds(t, 2*time.Second, "no pod deleted, nothing drained", func() (bool, string) {
		_, ok := e.pods()[nodes[1]]
		return ok && e.slurm.Count(&e.slurm.Drains) == 0, fmt.Sprint(podNodes(e.pods()))
	})
	e.slurm.SetStale(false)
	e.converged(nodes[0])
}

// A Failed slurmd pod (evicted, refused at admission) is replaced.
func TestReconcileReplacesAFailedPod(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(1, 1)
	e.create(1)
	e.converged(nodes...)
	p := e.pods()[nodes[0]]
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
	require.NoError(t, e.c.Status().Update(context.Background(), &p))
	testenv.Eventually(t, 30*time.Second, "a new pod", func() (bool, string) {
		n, ok := e.pods()[nodes[0]]
		return ok && n.UID != p.UID && n.Status.Phase == corev1.PodRunning, fmt.Sprint(podNodes(e.pods()))
	})
	testenv.Eventually(t, 30*time.Second, "a FailedDaemonPod event", func() (bool, string) {
		return e.hasEvent(keys.EventPodFailed, "Evicted")
	})
}

// Deleting the NodeSet takes its pods and Slurm node records, then goes.
func TestReconcileDeletionTakesEverything(t *testing.T) {
	e := newNodeSetEnv(t)
	nodes := e.nodes(2, 2)
	e.create(1)
	e.converged(nodes...)
	require.NoError(t, e.c.Delete(context.Background(), e.get(), client.PropagationPolicy("Background")))
	testenv.Eventually(t, 45*time.Second, "the NodeSet, its pods and Slurm records gone", func() (bool, string) {
		return e.get() == nil && len(e.pods()) == 0 && !e.slurm.Has(nodes[0]) && !e.slurm.Has(nodes[1]),
			fmt.Sprintf("pods %v, slurm %v %v", podNodes(e.pods()), e.slurm.Has(nodes[0]), e.slurm.Has(nodes[1]))
	})
}
