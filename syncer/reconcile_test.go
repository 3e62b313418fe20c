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

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// kubectl cordon drains the Slurm node with onepool's reason and the
// operator's words, and records it on the Node; uncordon resumes it and
// the record goes.
func TestReconcileCordonDrainsUncordonResumes(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-0")
	pod := e.nodeWithPod("gpu-0")
	want, _ := drain.CordonReason("RMA 4411")

	e.cordon(pod.Spec.NodeName, true, "RMA 4411")
	e.slurmIs("gpu-0", want)
	e.eventually(20*time.Second, "the Node records onepool's drain", func() (bool, string) {
		n := e.node(pod.Spec.NodeName)
		return n.Annotations[keys.AnnotationDrainApplied] == want && n.Annotations[keys.AnnotationDrainAppliedAt] != "", fmt.Sprint(n.Annotations)
	})
	e.eventually(20*time.Second, "a SlurmNodeDrained event", func() (bool, string) {
		return e.hasEvent("", pod.Spec.NodeName, keys.EventDrained, want)
	})

	e.cordon(pod.Spec.NodeName, false, "")
	e.slurmIs("gpu-0", "")
	e.eventually(20*time.Second, "the record goes", func() (bool, string) {
		n := e.node(pod.Spec.NodeName)
		return n.Annotations[keys.AnnotationDrainApplied] == "", fmt.Sprint(n.Annotations)
	})
	e.eventually(20*time.Second, "a SlurmNodeResumed event", func() (bool, string) {
		return e.hasEvent("", pod.Spec.NodeName, keys.EventResumed, "no longer has a cause")
	})
}

// An admin's drain is never resumed or rewritten: a cordon on top keeps
// it (with an event), an uncordon leaves it, and the Node shows Slurm's
// reason.
func TestReconcileLeavesAnAdminDrainAlone(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-1")
	pod := e.nodeWithPod("gpu-1")
	require.NoError(t, e.slurm.Set("gpu-1", true, drain.ReasonCordoned, "root")) // an admin typing onepool's words

	e.eventually(20*time.Second, "the Node mirrors the admin's drain", func() (bool, string) {
		n := e.node(pod.Spec.NodeName)
		return n.Annotations[keys.AnnotationSlurmReason] == drain.ReasonCordoned, fmt.Sprint(n.Annotations)
	})
	e.cordon(pod.Spec.NodeName, true, "")
	e.eventually(20*time.Second, "AdminDrainKept", func() (bool, string) {
		return e.hasEvent("", pod.Spec.NodeName, keys.EventAdminDrainKept, drain.ReasonCordoned)
	})
	e.cordon(pod.Spec.NodeName, false, "")
	e.holds(3*time.Second, "the admin's drain stays", func() (bool, string) {
		n := e.slurm.Get("gpu-1")
		return n.State.Drain() && n.Reason == drain.ReasonCordoned && n.ReasonSetByUser == "root", fmt.Sprintf("%v %q by %s", n.State, n.Reason, n.ReasonSetByUser)
	})
	assert.Zero(t, e.slurm.Count(&e.slurm.Resumes))
}

// While Slurm's state is unknown nothing is drained or resumed; once it is
// known again the cordon takes effect.
func TestReconcileWaitsWhileSlurmIsUnknown(t *testing.T) {
	e := newSyncerEnv(t, Options{UnknownRetry: 200 * time.Millisecond}, "gpu-2")
	pod := e.nodeWithPod("gpu-2")
	e.slurm.SetStale(true)
	e.cordon(pod.Spec.NodeName, true, "")
	e.holds(2*time.Second, "no drain on an unknown state", func() (bool, string) {
		n := e.slurm.Get("gpu-2")
		return !n.State.Drain(), fmt.Sprint(n.State)
	})
	e.slurm.SetStale(false)
	e.slurmIs("gpu-2", drain.ReasonCordoned)
}

// A deleted slurmd pod drains its node first; then the finalizer goes and
// the pod with it. The drain stays (no pod is left to say otherwise).
func TestReconcileDeletedPodDrainsThenGoes(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-3")
	pod := e.nodeWithPod("gpu-3")
	require.NoError(t, e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0))) // no kubelet to finish a graceful one
	e.slurmIs("gpu-3", drain.ReasonPodDeleted)
	e.eventually(30*time.Second, "the pod is gone", func() (bool, string) {
		p := e.pod(pod.Name)
		return p == nil, fmt.Sprintf("%+v", p)
	})
	assert.True(t, e.slurm.Get("gpu-3").State.Drain())
}

// A slurmd pod not Ready for longer than the grace drains its node; Ready
// again resumes it.
func TestReconcileNotReadyPastTheGrace(t *testing.T) {
	e := newSyncerEnv(t, Options{NotReadyGrace: 2 * time.Second}, "gpu-4")
	pod := e.nodeWithPod("gpu-4")
	e.setReady(pod.Name, false)
	e.holds(time.Second, "no drain within the grace", func() (bool, string) {
		return !e.slurm.Get("gpu-4").State.Drain(), ""
	})
	e.slurmIs("gpu-4", drain.ReasonPodNotReady)
	e.setReady(pod.Name, true)
	e.slurmIs("gpu-4", "")
}

// Slurm without the node: nothing to drain; a deleted pod still goes.
func TestReconcileUnknownSlurmNode(t *testing.T) {
	e := newSyncerEnv(t, Options{RegisterGrace: time.Second}, "other")
	pod := e.nodeWithPod("gpu-5")
	e.cordon(pod.Spec.NodeName, true, "")
	e.eventually(20*time.Second, "a warning that Slurm has no such node", func() (bool, string) {
		return e.hasEvent(e.ns, pod.Name, keys.EventSlurmUnavailable, "Slurm has no node")
	})
	require.NoError(t, e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0))) // no kubelet to finish a graceful one
	e.eventually(30*time.Second, "the pod is gone", func() (bool, string) {
		return e.pod(pod.Name) == nil, ""
	})
}

// A DOWN node onepool did not make shows on the Node as a condition.
func TestReconcileMirrorsADownNode(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-6")
	pod := e.nodeWithPod("gpu-6")
	e.slurm.Add(slurmrest.Node{Name: "gpu-6", State: slurmrest.NodeState{slurmrest.NodeDown}, Reason: "Not responding"})
	e.eventually(20*time.Second, "the Node's Slurm condition says down", func() (bool, string) {
		c := findCondition(e.node(pod.Spec.NodeName).Status.Conditions, keys.ConditionSlurmUnavailable)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == corev1.ConditionTrue && c.Reason == keys.ConditionReasonDown, fmt.Sprintf("%+v", *c)
	})
}

// A Node deleted while onepool's cordon drain holds: the drain stays while
// the Node is gone (the machine may be leaving); the Node registers again,
// uncordoned, and the drain is resumed. The soak found the drain kept for
// good: its only record was on the deleted Node.
func TestReconcileNodeDeletedAndBack(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-7")
	pod := e.nodeWithPod("gpu-7")
	e.cordon(pod.Spec.NodeName, true, "")
	e.slurmIs("gpu-7", drain.ReasonCordoned)
	e.eventually(20*time.Second, "the pod holds the record too", func() (bool, string) {
		p := e.pod(pod.Name)
		return p.Annotations[keys.AnnotationDrainApplied] == drain.ReasonCordoned, fmt.Sprint(p.Annotations)
	})
	node := e.node(pod.Spec.NodeName)
	require.NoError(t, e.c.Delete(context.Background(), node))
	e.holds(3*time.Second, "the drain stays while the Node is gone", func() (bool, string) {
		n := e.slurm.Get("gpu-7")
		return n.State.Drain() && n.Reason == drain.ReasonCordoned, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
	back := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels}}
	require.NoError(t, e.c.Create(context.Background(), back))
	e.slurmIs("gpu-7", "")
}

// The cordon's words change while Slurm refuses drains (slurmctld down):
// the drain in Slurm, with the old words, stays onepool's and an uncordon
// resumes it. The soak found it kept as an admin's drain for good: the
// record had been rewritten with the new words before the drain failed.
func TestReconcileNewWordsWhileDrainsFail(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-0")
	pod := e.nodeWithPod("gpu-0")
	first, _ := drain.CordonReason("PSU swap")
	second, _ := drain.CordonReason("PSU and fan swap")

	e.cordon(pod.Spec.NodeName, true, "PSU swap")
	e.slurmIs("gpu-0", first)
	e.slurm.RefuseDrains(true)
	e.cordon(pod.Spec.NodeName, true, "PSU and fan swap")
	e.eventually(20*time.Second, "a SlurmDrainFailed event", func() (bool, string) {
		return e.hasEvent("", pod.Spec.NodeName, keys.EventDrainFailed, second)
	})
	e.eventually(20*time.Second, "the Node records both drains", func() (bool, string) {
		a := e.node(pod.Spec.NodeName).Annotations
		return a[keys.AnnotationDrainApplied] == second && drain.Parse(a[keys.AnnotationDrainReplaced]).Reason == first, fmt.Sprint(a)
	})
	assert.False(t, func() bool { ok, _ := e.hasEvent("", pod.Spec.NodeName, keys.EventAdminDrainKept, ""); return ok }(),
		"onepool's own drain taken for an admin's")

	e.cordon(pod.Spec.NodeName, false, "")
	e.slurmIs("gpu-0", "")
	e.eventually(20*time.Second, "the records go", func() (bool, string) {
		a := e.node(pod.Spec.NodeName).Annotations
		return a[keys.AnnotationDrainApplied] == "" && a[keys.AnnotationDrainReplaced] == "", fmt.Sprint(a)
	})

	// Drains work again: new words replace the old; the old drain stays
	// recorded, since a slurmctld restart before it saved its state brings
	// the old words back (the soak, 2026-11-26: then kept as an admin's
	// drain for good). onepool drains over them with the new words again.
	e.slurm.RefuseDrains(false)
	e.cordon(pod.Spec.NodeName, true, "PSU swap")
	e.slurmIs("gpu-0", first)
	saved := e.slurm.Get("gpu-0") // what slurmctld had saved
	e.cordon(pod.Spec.NodeName, true, "PSU and fan swap")
	e.slurmIs("gpu-0", second)
	e.eventually(20*time.Second, "the new drain in place, the old one recorded", func() (bool, string) {
		a := e.node(pod.Spec.NodeName).Annotations
		return a[keys.AnnotationDrainApplied] == second && drain.Parse(a[keys.AnnotationDrainReplaced]).Reason == first, fmt.Sprint(a)
	})
	e.slurm.Add(saved) // slurmctld restarts from its saved state
	e.slurmIs("gpu-0", second)
	ok, _ := e.hasEvent("", pod.Spec.NodeName, keys.EventAdminDrainKept, "")
	assert.False(t, ok, "onepool's own drain taken for an admin's")
}

// Slurm's changes reach the syncer as they happen, not at its next resync:
// an admin's drain shows on the Node with the resync an hour away.
func TestReconcileHearsSlurmChanges(t *testing.T) {
	e := newSyncerEnv(t, Options{Resync: time.Hour}, "gpu-0")
	pod := e.nodeWithPod("gpu-0")
	require.NoError(t, e.slurm.Set("gpu-0", true, "bad ECC", "root"))
	e.eventually(10*time.Second, "the Node mirrors the admin's drain", func() (bool, string) {
		n := e.node(pod.Spec.NodeName)
		return n.Annotations[keys.AnnotationSlurmReason] == "bad ECC", fmt.Sprint(n.Annotations)
	})
	require.NoError(t, e.slurm.Set("gpu-0", false, "", "root"))
	e.eventually(10*time.Second, "the mirror goes with the resume", func() (bool, string) {
		n := e.node(pod.Spec.NodeName)
		return n.Annotations[keys.AnnotationSlurmReason] == "", fmt.Sprint(n.Annotations)
	})
}

// slurmctld restarted before saving its state brings back a drain onepool
// had resumed, with its old reason and time: onepool resumes it again,
// and does not take it for an admin's.
func TestReconcileResumeUndoneBySlurm(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-0")
	pod := e.nodeWithPod("gpu-0")
	want, _ := drain.CordonReason("PSU swap")
	e.cordon(pod.Spec.NodeName, true, "PSU swap")
	e.slurmIs("gpu-0", want)
	saved := e.slurm.Get("gpu-0") // what slurmctld had saved

	e.cordon(pod.Spec.NodeName, false, "")
	e.slurmIs("gpu-0", "")
	e.eventually(20*time.Second, "the Node records the resumed drain", func() (bool, string) {
		a := e.node(pod.Spec.NodeName).Annotations
		return a[keys.AnnotationDrainApplied] == "" && drain.Parse(a[keys.AnnotationDrainResumed]).Reason == want, fmt.Sprint(a)
	})
	resumes := e.slurm.Count(&e.slurm.Resumes)

	e.slurm.Add(saved) // slurmctld restarts from its saved state
	e.slurmIs("gpu-0", "")
	assert.Greater(t, e.slurm.Count(&e.slurm.Resumes), resumes, "resumed by onepool")
	ok, _ := e.hasEvent("", pod.Spec.NodeName, keys.EventAdminDrainKept, "")
	assert.False(t, ok, "onepool's own drain taken for an admin's")
	e.holds(2*time.Second, "no mirror of an admin's drain", func() (bool, string) {
		a := e.node(pod.Spec.NodeName).Annotations
		return a[keys.AnnotationSlurmReason] == "", fmt.Sprint(a)
	})
}

// Cordon, then the node reboots: Slurm marks it down and extends onepool's
// reason with its own cause ("… : Not responding", a new reason time).
// Back up and uncordoned, the drain is still onepool's and is resumed.
func TestReconcileCordonedNodeRebooted(t *testing.T) {
	e := newSyncerEnv(t, Options{}, "gpu-0")
	pod := e.nodeWithPod("gpu-0")
	want, _ := drain.CordonReason("reboot for firmware")
	e.cordon(pod.Spec.NodeName, true, "reboot for firmware")
	e.slurmIs("gpu-0", want)

	down := e.slurm.Get("gpu-0")
	down.State = slurmrest.NodeState{slurmrest.NodeDown, "DRAIN"}
	down.Reason, down.ReasonChanged = want+" : Not responding", time.Now().Add(3*time.Minute).Truncate(time.Second)
	e.slurm.Add(down)
	e.holds(2*time.Second, "no redrain over Slurm's words while cordoned", func() (bool, string) {
		n := e.slurm.Get("gpu-0")
		return n.Reason == want+" : Not responding", n.Reason
	})
	e.slurm.SetBase("gpu-0", slurmrest.NodeIdle) // back up; Slurm keeps the drain

	e.cordon(pod.Spec.NodeName, false, "")
	e.slurmIs("gpu-0", "")
}
