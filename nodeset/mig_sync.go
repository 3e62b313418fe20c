package nodeset

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// setMIGConfig hands the Node's MIG layout to NVIDIA's mig-manager: its
// label, and its state set to pending, so that the old layout's success is
// never read as the new one's. Only once Slurm, asked live, says the node
// runs nothing; the patch holds the Node's resourceVersion, so a layout
// asked since the NodeSet read the Node is not overwritten.
func (r *Reconciler) setMIGConfig(ctx context.Context, ns *v1alpha1.NodeSet, n nodeState, layout string, fail func(error)) {
	// confirmFree: no record (never registered), or drained and free.
	if n.node == nil || !r.confirmFree(ctx, ns, n, fail) {
		return
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": n.node.ResourceVersion,
		"labels":          map[string]string{keys.LabelNVIDIAMIGConfig: layout, keys.LabelNVIDIAMIGConfigState: keys.MIGConfigPending},
	}})
	if err != nil {
		fail(fmt.Errorf("MIG layout patch for %s: %w", n.nodeName, err))
		return
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.nodeName}}
	switch err := r.client.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// The Node changed (or went) since it was read: decided again.
		return
	case err != nil:
		r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventMIGConfigFailed, keys.ActionSetMIGConfig, "set MIG layout %s on Node %s: %v", layout, n.nodeName, err)
		fail(fmt.Errorf("set MIG layout of %s: %w", n.nodeName, err))
		return
	}
	r.mu.Lock()
	delete(r.migFailed, n.slurmName)
	r.mu.Unlock()
	r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventMIGConfigSet, keys.ActionSetMIGConfig,
		"Slurm node %s is drained and free, its slurmd pod gone: MIG layout %s handed to mig-manager (%s); its new slurmd pod is made on %s=%s",
		n.slurmName, layout, keys.LabelNVIDIAMIGConfig, keys.LabelNVIDIAMIGConfigState, keys.MIGConfigSuccess)
}

// noteMIG reports, once per layout, that mig-manager failed to apply the
// layout the NodeSet handed over.
func (r *Reconciler) noteMIG(ns *v1alpha1.NodeSet, n nodeState, s step) {
	if !s.migFailed {
		return
	}
	r.mu.Lock()
	first := r.migFailed[n.slurmName] != s.layout
	r.migFailed[n.slurmName] = s.layout
	r.mu.Unlock()
	if first {
		r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventMIGConfigFailed, keys.ActionSetMIGConfig,
			"mig-manager failed to apply MIG layout %s on Node %s (%s=%s): Slurm node %s stays drained, with no slurmd pod; ask another layout by %s",
			s.layout, n.nodeName, keys.LabelNVIDIAMIGConfigState, keys.MIGConfigFailed, n.slurmName, keys.LabelMIGConfig)
	}
}
