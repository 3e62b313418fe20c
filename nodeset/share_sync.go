package nodeset

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// podsOnNode lists the pods bound to a Node. The manager's cache holds only
// slurmd pods, so this reads the API server (a field selector the API
// server serves from its watch cache, as for a kubelet).
type podsOnNode func(ctx context.Context, node string) ([]corev1.Pod, error)

func apiPodsOnNode(r client.Reader) podsOnNode {
	return func(ctx context.Context, node string) ([]corev1.Pod, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var list corev1.PodList
		if err := r.List(ctx, &list, client.MatchingFields{"spec.nodeName": node}); err != nil {
			return nil, fmt.Errorf("list the pods on Node %s: %w", node, err)
		}
		return list.Items, nil
	}
}

// shareFor gives pod, the slurmd pod about to be made on n's Node, Slurm's
// share of that Node. Where nothing is to be counted (the template sets a
// static count, or the Node reports no allocatable) the pod stays as it
// is; where nothing is left for Slurm it is not made (the error says why).
func (r *Reconciler) shareFor(ctx context.Context, ns *v1alpha1.NodeSet, tmpl *corev1.Pod, n nodeState, pod *corev1.Pod) error {
	if staticCount(tmpl) || n.node == nil {
		return nil
	}
	pods, err := r.podsOn(ctx, n.nodeName)
	if err != nil {
		return err
	}
	s, err := slurmShare(n.node, pods, pod)
	var noRoom *NoRoomError
	switch {
	case errors.Is(err, errNoAllocatable):
		return nil
	case errors.As(err, &noRoom):
		r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventNoRoomForSlurm, keys.ActionCreatePod, "no slurmd pod on %s: %v", n.nodeName, err)
		return err
	case err != nil:
		return err
	}
	withShare(pod, s)
	return nil
}

// shareChecksPerReconcile bounds the Nodes one reconcile counts again (one
// API read each); more due are counted by the next, a second later.
const shareChecksPerReconcile = 32

// shareDue says whether a Node's share is to be counted again: every
// ShareCheck since it was last counted, and a slurmd pod's creation counts
// (shareFor counted the Node just before making it). Without the pod's
// time, a NodeSet of 2,000 new members read the pods of every Node a
// second time within seconds of counting them (one API read each, 32 a
// reconcile, in line): 46-50 s to converge instead of 36 s (issue 38).
func shareDue(lastChecked, podCreated, now time.Time, every time.Duration) bool {
	if podCreated.After(lastChecked) {
		lastChecked = podCreated
	}
	return now.Sub(lastChecked) >= every
}

// checkShares counts again, at most every ShareCheck per node, Slurm's
// share of each Node whose slurmd pod registered with a counted share. When
// pods onepool did not place now ask more than was left then, it says so on
// the slurmd pod: Slurm may give out CPUs or memory the kubelet also gives
// out. Slurm cannot change a dynamic node's count while jobs run; the pod's
// next replacement counts again. more says that due Nodes were left for the
// next reconcile.
func (r *Reconciler) checkShares(ctx context.Context, nodes []nodeState) (more bool) {
	if r.opts.ShareCheck < 0 {
		return false
	}
	now, checked := time.Now(), 0
	for _, n := range nodes {
		if n.pod == nil || n.node == nil || n.pod.DeletionTimestamp != nil || n.pod.Annotations[keys.AnnotationSlurmShare] == "" {
			continue
		}
		r.mu.Lock()
		due := shareDue(r.shareChecked[n.nodeName], n.pod.CreationTimestamp.Time, now, r.opts.ShareCheck)
		if due && checked < shareChecksPerReconcile {
			r.shareChecked[n.nodeName] = now
		}
		r.mu.Unlock()
		if !due {
			continue
		}
		if checked == shareChecksPerReconcile {
			return true
		}
		checked++
		registered, err := parseShare(n.pod.Annotations[keys.AnnotationSlurmShare])
		if err != nil {
			r.log.Info("slurmd pod's share unreadable", "pod", n.pod.Name, "error", err.Error())
			continue
		}
		pods, err := r.podsOn(ctx, n.nodeName)
		if err != nil {
			r.log.Info("cannot count Slurm's share", "node", n.nodeName, "error", err.Error())
			continue
		}
		left, err := slurmShare(n.node, pods, n.pod)
		var noRoom *NoRoomError
		switch {
		case errors.Is(err, errNoAllocatable):
			continue
		case errors.As(err, &noRoom):
			left = share{}
		case err != nil:
			continue
		}
		if left.covers(registered) {
			continue
		}
		r.recorder.Eventf(n.pod, nil, corev1.EventTypeWarning, keys.EventShareOvercommitted, keys.ActionSync,
			"Slurm node %s registered with %s; pods onepool did not place now leave Slurm %s of Node %s: Slurm and the kubelet may give out the same CPUs or memory until this pod is replaced",
			n.slurmName, registered, left, n.nodeName)
	}
	return false
}
