package syncer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
)

// untouched says onepool left the pod alone: no finalizer, none of its
// annotations.
func untouched(p *corev1.Pod) (bool, string) {
	if p == nil {
		return true, "gone"
	}
	if slices.Contains(p.Finalizers, keys.FinalizerSlurmdPod) {
		return false, fmt.Sprintf("finalizers %v", p.Finalizers)
	}
	for _, k := range append([]string{keys.AnnotationSlurmNode, keys.AnnotationDrainApplied}, mirrorKeys...) {
		if _, ok := p.Annotations[k]; ok {
			return false, fmt.Sprintf("annotations %v", p.Annotations)
		}
	}
	return true, ""
}

// A pod with the slurmd label on a Node, which no NodeSet owns, is anyone's
// pod: not Ready past the grace, then deleted, it drains nothing and gets
// no finalizer or annotation. A NodeSet's pod beside it still drains.
func TestReconcileIgnoresAPodNoNodeSetOwns(t *testing.T) {
	e := newSyncerEnv(t, Options{NotReadyGrace: time.Second}, "gpu-0", "gpu-1")
	fake := e.podOnNode("gpu-1", nil)
	e.setReady(fake.Name, false)
	e.holds(3*time.Second, "the pod no NodeSet owns is left alone", func() (bool, string) {
		if n := e.slurm.Get("gpu-1"); n.State.Drain() {
			return false, fmt.Sprintf("Slurm node gpu-1 %v %q", n.State, n.Reason)
		}
		return untouched(e.pod(fake.Name))
	})
	require.NoError(t, e.c.Delete(context.Background(), fake, client.GracePeriodSeconds(0)))
	e.eventually(10*time.Second, "the pod is gone at once", func() (bool, string) {
		p := e.pod(fake.Name)
		return p == nil, fmt.Sprintf("%+v", p)
	})
	e.holds(2*time.Second, "no drain after it went", func() (bool, string) {
		n := e.slurm.Get("gpu-1")
		return !n.State.Drain(), fmt.Sprintf("%v %q", n.State, n.Reason)
	})
	assert.Zero(t, e.slurm.Count(&e.slurm.Drains), "drain calls")

	owned := e.nodeWithPod("gpu-0")
	e.setReady(owned.Name, false)
	e.slurmIs("gpu-0", drain.ReasonPodNotReady)
	require.NoError(t, e.c.Delete(context.Background(), owned, client.GracePeriodSeconds(0)))
	e.slurmIs("gpu-0", drain.ReasonPodDeleted)
	e.eventually(30*time.Second, "the NodeSet's pod goes once drained", func() (bool, string) {
		return e.pod(owned.Name) == nil, ""
	})
	assert.False(t, e.slurm.Get("gpu-1").State.Drain())
}

// onepool's finalizer on a pod no NodeSet owns (put there by a version that
// trusted the label) is taken off, and Slurm is not touched: deleted, the
// pod goes.
func TestReconcileDisownsAnOldFinalizer(t *testing.T) {
	e := newSyncerEnv(t, Options{NotReadyGrace: time.Second}, "gpu-2")
	fake := e.podOnNode("gpu-2", nil)
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, keys.FinalizerSlurmdPod)
	require.NoError(t, e.c.Patch(context.Background(), fake, client.RawPatch(types.MergePatchType, []byte(patch))))
	e.eventually(10*time.Second, "onepool's finalizer taken off", func() (bool, string) {
		return untouched(e.pod(fake.Name))
	})
	require.NoError(t, e.c.Delete(context.Background(), fake, client.GracePeriodSeconds(0)))
	e.eventually(10*time.Second, "the pod is gone", func() (bool, string) {
		return e.pod(fake.Name) == nil, ""
	})
	assert.Zero(t, e.slurm.Count(&e.slurm.Drains), "drain calls")
	assert.False(t, e.slurm.Get("gpu-2").State.Drain())
}

// A pod that names the test's NodeSet as its controller, with another UID
// (its author copied the name), is not the NodeSet's.
func TestReconcileIgnoresACopiedOwnerReference(t *testing.T) {
	e := newSyncerEnv(t, Options{NotReadyGrace: time.Second}, "gpu-3")
	ref := e.ownerRef()
	ref.UID = "0000-copied"
	fake := e.podOnNode("gpu-3", &ref)
	e.setReady(fake.Name, false)
	e.holds(3*time.Second, "the pod with the copied owner is left alone", func() (bool, string) {
		if n := e.slurm.Get("gpu-3"); n.State.Drain() {
			return false, fmt.Sprintf("Slurm node gpu-3 %v %q", n.State, n.Reason)
		}
		return untouched(e.pod(fake.Name))
	})
	assert.Zero(t, e.slurm.Count(&e.slurm.Drains), "drain calls")
}
