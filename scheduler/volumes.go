package scheduler

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/ephemeral"
)

// VolumeEventHandler wakes pods: a PersistentVolumeClaim added or changed (bound by
// the PV controller, say), and a PersistentVolume, StorageClass or
// CSIStorageCapacity added or changed, may change the Nodes a pod's
// volumes allow (NodeFit's VolumeBinding and VolumeZone): the pods they
// concern are placed again as for a Node change (NodeEventHandler), and
// their jobs waiting in Slurm's queue have the nodes they leave out worked
// out again. A claim concerns the pods that use it; the others every pod
// with a claim. Pods without one are never woken for them.
func (c *manager) VolumeEventHandler() cache.ResourceEventHandler {
	changed := func(obj any) {
		var only func(*corev1.Pod) bool
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			only = func(p *corev1.Pod) bool {
				return p.Namespace == pvc.Namespace && slices.Contains(claimNames(p), pvc.Name)
			}
		} else {
			only = func(p *corev1.Pod) bool { return len(claimNames(p)) > 0 }
		}
		c.wakeConstrained(only)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, o any) {
			a, err1 := meta.Accessor(old)
			b, err2 := meta.Accessor(o)
			if err1 == nil && err2 == nil && a.GetResourceVersion() != "" && a.GetResourceVersion() == b.GetResourceVersion() {
				return // a resync
			}
			changed(o)
		},
	}
}

// claimNames are the PersistentVolumeClaims a pod's volumes use, its
// generic ephemeral volumes' included (nil: none).
func claimNames(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, ephemeral.VolumeClaimName(pod, v))
		}
	}
	return out
}
