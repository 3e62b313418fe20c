package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
)

// mirrorKeys are the annotations the Slurm → Kubernetes side owns.
var mirrorKeys = []string{keys.AnnotationSlurmReason, keys.AnnotationSlurmSince, keys.AnnotationSlurmBy, keys.AnnotationSlurmState}

// Reconcile brings one slurmd pod's Slurm node and its Kubernetes objects in
// line. It changes nothing while Slurm's state is unknown.
func (r *PodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if isHostRequest(req) {
		return r.reconcileHost(ctx, req)
	}
	log := r.log.WithValues("pod", req.NamespacedName)
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		r.observeLag(req.NamespacedName, "", false)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The label brought the pod here; only a NodeSet's ownership makes it
	// a slurmd pod. Any other pod is its author's: onepool neither holds it,
	// nor drains for it, nor writes on it.
	trusted, err := slurmnode.IsSlurmdPod(ctx, r.client, pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !trusted {
		r.observeLag(req.NamespacedName, "", false)
		return ctrl.Result{}, r.disown(ctx, pod)
	}
	if pod.Spec.NodeName == "" {
		return ctrl.Result{}, nil // not bound yet: no Slurm node to speak of
	}
	node := &corev1.Node{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		node = nil
	}
	slurmName := pod.Spec.NodeName
	if node != nil {
		slurmName = slurmnode.Of(node)
	}
	deleting := pod.DeletionTimestamp != nil
	if err := r.ensurePodMeta(ctx, pod, slurmName, deleting); err != nil {
		return ctrl.Result{}, err
	}

	st, err := r.slurm.Node(slurmName)
	switch {
	case errors.Is(err, slurmrest.ErrNotFound):
		// A fresh cache without this node: nothing in Slurm to drain or
		// mirror. A deleted pod may go; anything else waits. A new pod's
		// slurmd has not registered yet: a warning only once it had time to.
		r.metrics.actions.WithLabelValues(dirToSlurm, actionNone, outcomeUnknown).Inc()
		if deleting {
			if wait, err := r.confirmReleasable(ctx, slurmName); wait > 0 || err != nil {
				return ctrl.Result{RequeueAfter: wait}, err
			}
			return ctrl.Result{}, r.releasePod(ctx, pod)
		}
		if wait := registerWait(pod, time.Now(), r.opts.RegisterGrace); wait > 0 {
			log.V(1).Info("Slurm does not know the node yet; slurmd may still be registering", "slurmNode", slurmName)
			return ctrl.Result{RequeueAfter: min(wait, r.opts.Resync)}, nil
		}
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, keys.EventSlurmUnavailable, keys.ActionSync,
			"Slurm has no node %q %s after the pod was made; nothing is changed", slurmName, r.opts.RegisterGrace)
		return ctrl.Result{RequeueAfter: r.opts.Resync}, nil
	case err != nil:
		// Unknown: fail closed, look again soon.
		r.metrics.actions.WithLabelValues(dirToSlurm, actionNone, outcomeUnknown).Inc()
		log.V(1).Info("Slurm state unknown; changing nothing", "slurmNode", slurmName, "error", err.Error())
		return ctrl.Result{RequeueAfter: r.opts.UnknownRetry}, nil
	}

	return r.act(ctx, req.NamespacedName, pod, node, slurmName, st)
}

// act decides on a known Slurm state and carries the decision out on both
// sides. pod is nil for a Node whose slurmd runs on the host: then only the
// Node's cordon drains, and only the Node mirrors Slurm.
func (r *PodReconciler) act(ctx context.Context, key types.NamespacedName, pod *corev1.Pod, node *corev1.Node, slurmName string, st slurmrest.Node) (ctrl.Result, error) {
	log := r.log.WithValues("key", key)
	rec := recordOf(pod, node)
	if r.cacheBehind(slurmName) || r.recordBehind(slurmName, rec) {
		// Our own drain, resume or record is not in the cache yet: acting
		// on the older view would undo it, report a resume that never
		// happened, or take onepool's drain for an admin's.
		return ctrl.Result{RequeueAfter: cacheCatchUp}, nil
	}
	o := observed{
		now: time.Now(), grace: r.opts.NotReadyGrace, slurm: st,
		record: rec, nodeMissing: node == nil, podReady: true,
	}
	if pod != nil {
		o.podGone = pod.DeletionTimestamp != nil
		o.podReady, o.notReadyAt = podReadiness(pod)
	}
	if node != nil {
		o.cordoned, o.cordonText = node.Spec.Unschedulable, node.Annotations[keys.AnnotationCordonReason]
		o.nodeSetRec = drain.Read(node.Annotations, keys.AnnotationNodeSetDrain, keys.AnnotationNodeSetDrainAt)
	}
	d := plan(o)
	logDecision(log, slurmName, o, d)
	if d.cordonNote != "" && d.action == actDrain && node != nil {
		// Once, with the drain that carries the changed words.
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, keys.EventBadAnnotation, keys.ActionDrain,
			"annotation %s: %s; draining with %q", keys.AnnotationCordonReason, d.cordonNote, d.reason)
	}
	if d.keptAdmin && o.record.Reason == "" && node != nil && o.cordoned {
		r.recorder.Eventf(node, nil, corev1.EventTypeNormal, keys.EventAdminDrainKept, keys.ActionDrain, "Slurm node %s is drained by an admin (%q); onepool leaves that drain alone", slurmName, st.Reason)
	}
	announce, err := r.applySlurm(ctx, pod, node, slurmName, st, d)
	if apierrors.IsConflict(err) {
		// The object changed since the cache read it: decide again on
		// the newer one. Nothing was done in Slurm.
		log.V(1).Info("the record's object changed under us; deciding again", "error", err.Error())
		return ctrl.Result{RequeueAfter: cacheCatchUp}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	acted := announce != nil
	// The Node's condition and annotations first, the event after: whoever
	// reads the event finds the Node already saying so. The drain is done
	// either way, so the event goes out even if the Node could not be written.
	mirrored, err := r.applyMirror(ctx, pod, node, d)
	if announce != nil {
		announce()
	}
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: cacheCatchUp}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if acted {
		r.observeLag(key, dirToSlurm, true)
	} else {
		r.observeLag(key, dirToKube, mirrored)
	}
	if d.releasePod && pod != nil {
		if d.action != actDrain {
			// Released on a drain the cache shows: make sure it is still there.
			if wait, err := r.confirmReleasable(ctx, slurmName); wait > 0 || err != nil {
				return ctrl.Result{RequeueAfter: wait}, err
			}
		}
		return ctrl.Result{}, r.releasePod(ctx, pod)
	}
	next := r.opts.Resync
	if d.recheckIn > 0 && d.recheckIn < next {
		next = d.recheckIn
	}
	if acted {
		// Look again once the cache shows the write: a change someone else
		// makes in the same poll interval (a resume right after our drain)
		// leaves the cache no change to report.
		next = cacheCatchUp
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// cacheCatchUp is how soon a pod is looked at again after onepool wrote to
// its Slurm node: about one cache poll.
const cacheCatchUp = 500 * time.Millisecond

func (r *PodReconciler) noteWrite(slurmName string) {
	r.mu.Lock()
	r.wrote[slurmName] = time.Now()
	r.mu.Unlock()
}

// recordWrite is a drain record onepool wrote, and when.
type recordWrite struct {
	rec drainRecord
	at  time.Time
}

// recordCatchUpLimit bounds how long a record onepool wrote may be missing
// from the cache before the cache is believed again (someone else changed
// the annotations, or the object went).
const recordCatchUpLimit = 10 * time.Second

func (r *PodReconciler) noteRecord(slurmName string, rec drainRecord) {
	r.mu.Lock()
	// As the annotations hold it: times to the second.
	sec := func(d drain.Record) drain.Record { d.At = d.At.Truncate(time.Second); return d }
	rec = drainRecord{Record: sec(rec.Record), replaced: sec(rec.replaced), resumed: sec(rec.resumed)}
	r.recorded[slurmName] = recordWrite{rec: rec, at: time.Now()}
	r.mu.Unlock()
}

// recordBehind says whether the cached record predates onepool's last
// write of it.
func (r *PodReconciler) recordBehind(slurmName string, cached drainRecord) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.recorded[slurmName]
	if !ok {
		return false
	}
	if cached.same(w.rec) || time.Since(w.at) > recordCatchUpLimit {
		delete(r.recorded, slurmName)
		return false
	}
	return true
}

func (r *PodReconciler) cacheBehind(slurmName string) bool {
	r.mu.Lock()
	at, ok := r.wrote[slurmName]
	r.mu.Unlock()
	if !ok {
		return false
	}
	if r.slurm.NodeSyncedAt(slurmName).After(at) {
		r.mu.Lock()
		if r.wrote[slurmName].Equal(at) {
			delete(r.wrote, slurmName)
		}
		r.mu.Unlock()
		return false
	}
	return true
}

// applySlurm drains or resumes the Slurm node as decided. After a change in
// Slurm it returns the event that announces it, for the caller to record
// once the Kubernetes side shows it too; nil when nothing changed.
func (r *PodReconciler) applySlurm(ctx context.Context, pod *corev1.Pod, node *corev1.Node, slurmName string, st slurmrest.Node, d decision) (func(), error) {
	target := eventTarget(pod, node)
	// The record first: a drain onepool made but did not write down would
	// be an admin's drain to it, and never undone.
	if d.record != nil {
		if err := r.writeRecord(ctx, pod, node, *d.record); err != nil {
			return nil, err
		}
		r.noteRecord(slurmName, *d.record)
	}
	switch d.action {
	case actDrain:
		action := actionDrain
		if d.redrain {
			action = actionRedrain
		}
		if err := r.slurm.Drain(ctx, slurmName, d.reason); err != nil {
			r.metrics.actions.WithLabelValues(dirToSlurm, action, outcomeError).Inc()
			r.recorder.Eventf(target, nil, corev1.EventTypeWarning, keys.EventDrainFailed, keys.ActionDrain, "draining Slurm node %s with %q: %v", slurmName, d.reason, err)
			return nil, fmt.Errorf("drain %s: %w", slurmName, err)
		}
		r.noteWrite(slurmName)
		r.metrics.actions.WithLabelValues(dirToSlurm, action, outcomeSuccess).Inc()
		if d.redrain {
			return func() {
				r.recorder.Eventf(target, nil, corev1.EventTypeWarning, keys.EventRedrained, keys.ActionDrain,
					"Slurm node %s was resumed in Slurm while %q still holds; drained again", slurmName, d.reason)
			}, nil
		}
		return func() {
			r.recorder.Eventf(target, nil, corev1.EventTypeNormal, keys.EventDrained, keys.ActionDrain, "Slurm node %s drained: %s", slurmName, d.reason)
		}, nil
	case actResume:
		err := r.slurm.Resume(ctx, slurmName)
		if err != nil {
			r.metrics.actions.WithLabelValues(dirToSlurm, actionResume, outcomeError).Inc()
			r.recorder.Eventf(target, nil, corev1.EventTypeWarning, keys.EventResumeFailed, keys.ActionResume, "resuming Slurm node %s: %v", slurmName, err)
			return nil, fmt.Errorf("resume %s: %w", slurmName, err)
		}
		r.noteWrite(slurmName)
		r.metrics.actions.WithLabelValues(dirToSlurm, actionResume, outcomeSuccess).Inc()
		return func() {
			r.recorder.Eventf(target, nil, corev1.EventTypeNormal, keys.EventResumed, keys.ActionResume, "Slurm node %s resumed (onepool's drain %q no longer has a cause)", slurmName, st.Reason)
		}, nil
	}
	return nil, nil
}

// applyMirror writes Slurm's view onto the pod and the Node: annotations
// and the SlurmUnavailable condition. It reports whether anything changed.
func (r *PodReconciler) applyMirror(ctx context.Context, pod *corev1.Pod, node *corev1.Node, d decision) (bool, error) {
	changed := false
	for _, obj := range recordHolders(pod, node) {
		want := maps.Clone(obj.GetAnnotations())
		if want == nil {
			want = map[string]string{}
		}
		for _, k := range mirrorKeys {
			delete(want, k)
		}
		maps.Copy(want, d.mirror)
		if maps.Equal(want, obj.GetAnnotations()) || (len(want) == 0 && len(obj.GetAnnotations()) == 0) {
			continue
		}
		// Locked to the version read: a mirror decided on a stale record
		// must not land.
		patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
		obj.SetAnnotations(want)
		if err := r.client.Patch(ctx, obj, patch); err != nil {
			r.metrics.actions.WithLabelValues(dirToKube, actionAnnotate, outcomeError).Inc()
			return changed, fmt.Errorf("annotating %s: %w", obj.GetName(), err)
		}
		r.metrics.actions.WithLabelValues(dirToKube, actionAnnotate, outcomeSuccess).Inc()
		changed = true
	}
	if node == nil {
		return changed, nil
	}
	old := findCondition(node.Status.Conditions, keys.ConditionSlurmUnavailable)
	if old != nil && old.Status == d.condition.Status && old.Reason == d.condition.Reason && old.Message == d.condition.Message {
		return changed, nil
	}
	if old == nil && d.condition.Status == corev1.ConditionFalse {
		return changed, nil // never set, nothing to say
	}
	patch := client.StrategicMergeFrom(node.DeepCopy())
	c := d.condition
	now := metav1.NewTime(time.Now())
	c.LastHeartbeatTime, c.LastTransitionTime = now, now
	if old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	setCondition(node, c)
	if err := r.client.Status().Patch(ctx, node, patch); err != nil {
		r.metrics.actions.WithLabelValues(dirToKube, actionCondition, outcomeError).Inc()
		return changed, fmt.Errorf("setting condition on node %s: %w", node.Name, err)
	}
	r.metrics.actions.WithLabelValues(dirToKube, actionCondition, outcomeSuccess).Inc()
	if (old == nil || old.Status != c.Status) && d.mirror != nil {
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, keys.EventSlurmUnavailable, keys.ActionMirror, "Slurm holds the node out: %s: %s", c.Reason, c.Message)
	} else if old != nil && old.Status == corev1.ConditionTrue && c.Status == corev1.ConditionFalse {
		r.recorder.Eventf(node, nil, corev1.EventTypeNormal, keys.EventSlurmAvailable, keys.ActionMirror, "Slurm may place jobs on this node again")
	}
	return true, nil
}

// ensurePodMeta records the Slurm node name on the pod and holds its
// deletion with the finalizer until the Slurm node is drained.
func (r *PodReconciler) ensurePodMeta(ctx context.Context, pod *corev1.Pod, slurmName string, deleting bool) error {
	needName := pod.Annotations[keys.AnnotationSlurmNode] != slurmName
	needFin := !deleting && !controllerutil.ContainsFinalizer(pod, keys.FinalizerSlurmdPod)
	if !needName && !needFin {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if needName {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[keys.AnnotationSlurmNode] = slurmName
	}
	if needFin {
		controllerutil.AddFinalizer(pod, keys.FinalizerSlurmdPod)
	}
	if err := r.client.Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("recording slurm node on pod: %w", err)
	}
	return nil
}

// confirmReleasable asks slurmrestd, live, whether a deleted pod's
// finalizer may go: Slurm has no such node, or it is drained. The cache may
// be a poll behind an admin's resume, and a released pod cannot be held
// again. A wait > 0 means look again then (the cache catches up and the
// node is drained first).
func (r *PodReconciler) confirmReleasable(ctx context.Context, slurmName string) (time.Duration, error) {
	live, err := r.slurm.LiveNode(ctx, slurmName)
	switch {
	case errors.Is(err, slurmrest.ErrNotFound):
		return 0, nil
	case err != nil:
		r.log.V(1).Info("Slurm state unknown; the pod's finalizer stays", "slurmNode", slurmName, "error", err.Error())
		return r.opts.UnknownRetry, nil
	case !live.State.Drain():
		return cacheCatchUp, nil
	}
	return 0, nil
}

// recordOf reads onepool's record of its drain: from the Node, else from
// the pod (a Node that is gone, or a record from before it moved to the
// Node). A record whose time does not parse has no time, and matches no
// drain.
func recordOf(pod *corev1.Pod, node *corev1.Node) drainRecord {
	for _, obj := range recordHolders(pod, node) {
		var r drainRecord
		r.Record, r.replaced, r.resumed = drain.SyncerRecords(obj.GetAnnotations())
		if r.Reason != "" || r.replaced.Reason != "" || r.resumed.Reason != "" {
			return r
		}
	}
	return drainRecord{}
}

// recordHolders are the objects that hold the record and the mirror: the
// Node first, then the slurmd pod (none for a slurmd on the host).
func recordHolders(pod *corev1.Pod, node *corev1.Node) []client.Object {
	var objs []client.Object
	if node != nil {
		objs = append(objs, node)
	}
	if pod != nil {
		objs = append(objs, pod)
	}
	return objs
}

// writeRecord writes the record on the Node and on the slurmd pod: the
// Node's copy outlives a replaced pod, the pod's a deleted Node (the soak
// found a Node deleted and registered again: with the only copy gone, the
// syncer took its own drain for an admin's and never resumed it).
func (r *PodReconciler) writeRecord(ctx context.Context, pod *corev1.Pod, node *corev1.Node, rec drainRecord) error {
	for _, obj := range recordHolders(pod, node) {
		if err := r.setRecord(ctx, obj, rec); err != nil {
			return err
		}
	}
	return nil
}

// setRecord makes obj hold exactly rec (nothing for an empty one).
func (r *PodReconciler) setRecord(ctx context.Context, obj client.Object, rec drainRecord) error {
	want := rec.Annotations(keys.AnnotationDrainApplied, keys.AnnotationDrainAppliedAt)
	want[keys.AnnotationDrainReplaced] = rec.replaced.Text()
	want[keys.AnnotationDrainResumed] = rec.resumed.Text()
	have := obj.GetAnnotations()
	same := true
	for k, v := range want {
		if cur, ok := have[k]; cur != v || (v == "" && ok) {
			same = false
		}
	}
	if same {
		return nil
	}
	// Locked to the version read: a record decided on a stale one must
	// not land (the caller decides again on the newer object).
	base := obj.DeepCopyObject().(client.Object)
	a := maps.Clone(have)
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range want {
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	obj.SetAnnotations(a)
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	if err := r.client.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording onepool's drain on %s: %w", obj.GetName(), err)
	}
	return nil
}

// disown lets go of a pod that is no slurmd pod but carries onepool's
// finalizer (put there by a version that trusted the label): the finalizer
// goes, and Slurm is not touched.
func (r *PodReconciler) disown(ctx context.Context, pod *corev1.Pod) error {
	if !controllerutil.ContainsFinalizer(pod, keys.FinalizerSlurmdPod) {
		return nil
	}
	r.log.Info("removing onepool's finalizer from a pod no NodeSet owns; its Slurm node is left alone", "pod", client.ObjectKeyFromObject(pod), "node", pod.Spec.NodeName)
	if err := r.releasePod(ctx, pod); err != nil {
		return fmt.Errorf("removing onepool's finalizer from pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (r *PodReconciler) releasePod(ctx context.Context, pod *corev1.Pod) error {
	if !controllerutil.ContainsFinalizer(pod, keys.FinalizerSlurmdPod) {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	controllerutil.RemoveFinalizer(pod, keys.FinalizerSlurmdPod)
	return client.IgnoreNotFound(r.client.Patch(ctx, pod, patch))
}

// registerWait is how much longer a pod's slurmd may take to register
// before Slurm not knowing its node is worth a warning: RegisterGrace from
// the pod's creation (0 once past it).
func registerWait(pod *corev1.Pod, now time.Time, grace time.Duration) time.Duration {
	return max(pod.CreationTimestamp.Add(grace).Sub(now), 0)
}

// podReadiness says whether the pod is Ready, and if not, since when.
func podReadiness(p *corev1.Pod) (ready bool, notReadySince time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return true, time.Time{}
			}
			return false, c.LastTransitionTime.Time
		}
	}
	return false, p.CreationTimestamp.Time
}

func findCondition(cs []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func setCondition(n *corev1.Node, c corev1.NodeCondition) {
	if old := findCondition(n.Status.Conditions, c.Type); old != nil {
		*old = c
		return
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
}

func eventTarget(pod *corev1.Pod, node *corev1.Node) client.Object {
	if node != nil {
		return node
	}
	return pod
}
