package nodeset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
)

// Reconcile brings one NodeSet one step closer to its spec on every node,
// then writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns v1alpha1.NodeSet
	if err := r.client.Get(ctx, req.NamespacedName, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			r.remember(req.NamespacedName, nil)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	deleting := ns.DeletionTimestamp != nil
	if !deleting && !controllerutil.ContainsFinalizer(&ns, keys.FinalizerNodeSet) {
		controllerutil.AddFinalizer(&ns, keys.FinalizerNodeSet)
		return ctrl.Result{}, r.client.Update(ctx, &ns)
	}
	if deleting && !controllerutil.ContainsFinalizer(&ns, keys.FinalizerNodeSet) {
		return ctrl.Result{}, nil
	}

	hash := templateHash(&ns)
	tmpl := podTemplate(&ns, hash)
	nodes, err := r.observe(ctx, &ns, tmpl, deleting)
	if err != nil {
		return ctrl.Result{}, err
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.slurmName)
	}
	r.remember(req.NamespacedName, names)

	p := params{hash: hash, onDelete: ns.Spec.UpdateStrategy.Type == v1alpha1.OnDelete, leftReason: drain.LeftReason(ns.Name), slurm: ns.Spec.Slurm}
	chosen := planUpdates(nodes, p, maxUnavailable(&ns, countWanted(nodes)))
	steps := make([]step, len(nodes))
	for i, n := range nodes {
		steps[i] = planNode(n, p, chosen[n.slurmName])
	}
	work := r.apply(ctx, &ns, tmpl, nodes, steps)
	r.markBusy(ctx, nodes)
	sharesLeft := r.checkShares(ctx, nodes)
	if !deleting {
		if err := r.ensurePDB(ctx, &ns); err != nil {
			work.errs = append(work.errs, err)
		}
	}

	st := r.status(&ns, nodes, steps, hash)
	if err := r.writeStatus(ctx, &ns, st); apierrors.IsConflict(err) {
		// Our cache was behind our own last write: read again soon, no error.
		work.more = true
	} else if err != nil {
		work.errs = append(work.errs, err)
	}
	if deleting && work.done(nodes) {
		return ctrl.Result{}, r.finish(ctx, &ns)
	}
	if len(work.errs) > 0 {
		return ctrl.Result{}, errors.Join(work.errs...)
	}
	if work.more {
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}
	if work.pending {
		return ctrl.Result{RequeueAfter: r.opts.Recheck}, nil
	}
	if sharesLeft {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if r.opts.ShareCheck > 0 && counted(nodes) {
		// Pods of other schedulers come and go without an event here.
		return ctrl.Result{RequeueAfter: r.opts.ShareCheck}, nil
	}
	return ctrl.Result{}, nil
}

// counted says whether some node's slurmd pod registered with a counted
// share (checkShares has something to look at again).
func counted(nodes []nodeState) bool {
	for _, n := range nodes {
		if n.pod != nil && n.pod.Annotations[keys.AnnotationSlurmShare] != "" {
			return true
		}
	}
	return false
}

// failedKey names one node of one NodeSet in the failed-pod backoff.
func failedKey(ns *v1alpha1.NodeSet, slurmName string) string {
	return ns.Namespace + "/" + ns.Name + "/" + slurmName
}

// observe gathers every node the NodeSet has to decide on: the Nodes it
// selects, the Nodes its pods run on, and Slurm nodes it drained to take away.
func (r *Reconciler) observe(ctx context.Context, ns *v1alpha1.NodeSet, tmpl *corev1.Pod, deleting bool) ([]nodeState, error) {
	// Only the Nodes the template's nodeSelector can pick, and without a
	// copy (observe and what it feeds only read them): a NodeSet on 2,000
	// of 12,000 Nodes copied all 12,000 on every reconcile (issue 38).
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if sel := tmpl.Spec.NodeSelector; len(sel) > 0 {
		opts = append(opts, client.MatchingLabels(sel))
	}
	var nodeList corev1.NodeList
	if err := r.client.List(ctx, &nodeList, opts...); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var podList corev1.PodList
	if err := r.client.List(ctx, &podList, client.InNamespace(ns.Namespace), client.MatchingLabels{keys.LabelNodeSet: ns.Name}); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	listed := make(map[string]bool, len(nodeList.Items))
	for i := range nodeList.Items {
		listed[nodeList.Items[i].Name] = true
	}
	// gone says a Node is not there any more; a read that fails says
	// nothing, and the Node counts as there.
	gone := func(name string) bool {
		if listed[name] {
			return false
		}
		err := r.client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
		return apierrors.IsNotFound(err)
	}
	byName := map[string]*nodeState{}
	get := func(slurmName string) *nodeState {
		if s, ok := byName[slurmName]; ok {
			return s
		}
		s := &nodeState{slurmName: slurmName}
		byName[slurmName] = s
		return s
	}
	for i := range nodeList.Items {
		node := &nodeList.Items[i]
		ok, err := feasible(tmpl, node)
		if err != nil {
			r.log.Info("node affinity does not parse; the Node counts as not selected", "nodeset", ns.Name, "node", node.Name, "err", err.Error())
		}
		if ok && !deleting {
			s := get(slurmnode.Of(node))
			s.wanted, s.node, s.nodeName = true, node, node.Name
			s.record = drain.Read(node.Annotations, keys.AnnotationNodeSetDrain, keys.AnnotationNodeSetDrainAt)
		}
	}
	for i := range podList.Items {
		pod := &podList.Items[i]
		if !slurmnode.IsSlurmd(pod, ns) {
			continue
		}
		s := get(slurmnode.ServedBy(pod))
		if s.nodeName == "" {
			s.nodeName = pod.Spec.NodeName
		}
		switch {
		case pod.DeletionTimestamp != nil:
			s.terminating++
			if pod.Spec.NodeName != "" && gone(pod.Spec.NodeName) {
				s.orphans = append(s.orphans, pod)
			}
		case s.pod == nil:
			s.pod = pod
		case pod.CreationTimestamp.Before(&s.pod.CreationTimestamp):
			s.twins = append(s.twins, s.pod)
			s.pod = pod
		default:
			s.twins = append(s.twins, pod)
		}
	}
	// Slurm nodes this NodeSet drained to take away, whose pods are gone.
	all, err := r.slurm.Nodes()
	known := err == nil
	left := drain.LeftReason(ns.Name)
	for _, sn := range all {
		if sn.State.Drain() && sn.Reason == left {
			get(sn.Name)
		}
	}
	out := make([]nodeState, 0, len(byName))
	now := r.failed.Clock.Now()
	for _, s := range byName {
		s.slurm = r.slurmView(s.slurmName, known)
		if s.pod != nil && podFailed(s.pod) && r.failed.IsInBackOffSinceUpdate(failedKey(ns, s.slurmName), now) {
			s.failedBackoff = r.failed.Get(failedKey(ns, s.slurmName))
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].slurmName < out[j].slurmName })
	return out, nil
}

func (r *Reconciler) slurmView(name string, known bool) slurmView {
	if !known {
		return slurmView{}
	}
	n, err := r.slurm.Node(name)
	switch {
	case err == nil:
		return slurmView{known: true, found: true, node: n}
	case errors.Is(err, slurmrest.ErrNotFound):
		return slurmView{known: true}
	}
	return slurmView{}
}

// outcome sums up what apply did.
type outcome struct {
	pending bool // something waits; look again soon
	more    bool // creations left for the next reconcile
	errs    []error
}

// done says a deleted NodeSet has nothing left: no pods, no Slurm records.
func (o outcome) done(nodes []nodeState) bool {
	// Records drained with the NodeSet's reason make a delete step, so pending.
	if o.pending || len(o.errs) > 0 {
		return false
	}
	for _, n := range nodes {
		if n.pod != nil || n.terminating > 0 || !n.slurm.known {
			return false
		}
	}
	return true
}

// apply carries out the steps, pod writes in parallel (bounded).
func (r *Reconciler) apply(ctx context.Context, ns *v1alpha1.NodeSet, tmpl *corev1.Pod, nodes []nodeState, steps []step) outcome {
	var mu sync.Mutex
	var o outcome
	fail := func(err error) {
		mu.Lock()
		o.errs = append(o.errs, err)
		mu.Unlock()
	}
	sem := make(chan struct{}, r.opts.Workers)
	var wg sync.WaitGroup
	creates := 0
	for i := range nodes {
		n, s := nodes[i], steps[i]
		for _, twin := range n.twins {
			r.deletePod(ctx, ns, twin, "a second slurmd pod on the same node", fail)
		}
		switch s.act {
		case actNone:
			continue
		case actWait:
			o.pending = true
			r.noteWait(ns, n, s)
			continue
		}
		o.pending = true
		if s.act == actCreate {
			if creates >= r.opts.CreateBatch {
				o.more = true
				continue
			}
			creates++
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.do(ctx, ns, tmpl, n, s, fail)
		}()
	}
	wg.Wait()
	return o
}

func (r *Reconciler) do(ctx context.Context, ns *v1alpha1.NodeSet, tmpl *corev1.Pod, n nodeState, s step, fail func(error)) {
	switch s.act {
	case actCreate:
		pod := buildPod(ns, tmpl, n.node)
		if err := r.shareFor(ctx, ns, tmpl, n, pod); err != nil {
			fail(fmt.Errorf("slurmd pod on %s: %w", n.nodeName, err))
			return
		}
		err := r.client.Create(ctx, pod)
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventPodCreateFailed, keys.ActionCreatePod, "create slurmd pod on %s: %v", n.nodeName, err)
			fail(fmt.Errorf("create pod %s: %w", pod.Name, err))
		default:
			r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventPodCreated, keys.ActionCreatePod, "created slurmd pod %s on %s", pod.Name, n.nodeName)
		}
	case actDrain:
		// The record first: a drain not written down would never be resumed.
		if err := r.record(ctx, n.nodeName, drain.Record{Reason: s.reason, At: time.Now()}); err != nil {
			fail(err)
			return
		}
		if err := r.slurm.Drain(ctx, n.slurmName, s.reason); err != nil {
			r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventSlurmActFailed, keys.ActionDrain, "drain Slurm node %s: %v", n.slurmName, err)
			fail(fmt.Errorf("drain %s: %w", n.slurmName, err))
			return
		}
		r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventNodeDraining, keys.ActionDrain, "drained Slurm node %s (%s); its pod goes once no job runs there", n.slurmName, s.reason)
	case actDeletePod:
		if !r.confirmFree(ctx, ns, n, fail) {
			return
		}
		r.deletePod(ctx, ns, n.pod, "no job runs on Slurm node "+n.slurmName, fail)
	case actResume:
		// The record kept after the resume is pinned to Slurm's own time
		// for this drain first (drain.Record Pin): the drain brought back
		// by slurmctld has that time; an admin's in the same words, set
		// seconds later, is the admin's.
		if pinned := n.record.Pin(n.slurm.node.Reason, n.slurm.node.ReasonChanged); !pinned.Equal(n.record) {
			if err := r.record(ctx, n.nodeName, pinned); err != nil {
				fail(err)
				return
			}
		}
		err := r.slurm.Resume(ctx, n.slurmName)
		if err != nil {
			r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventSlurmActFailed, keys.ActionResume, "resume Slurm node %s: %v", n.slurmName, err)
			fail(fmt.Errorf("resume %s: %w", n.slurmName, err))
			return
		}
		r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventResumed, keys.ActionResume, "resumed Slurm node %s: its new slurmd pod %s is Ready and registered", n.slurmName, n.pod.Name)
		// The record stays: it matches only this drain (its words and
		// Slurm's time), and slurmctld restarted before saving its state
		// brings this drain back; the NodeSet resumes it again. A new
		// drain replaces the record.
	case actForceDelete:
		if !r.confirmFree(ctx, ns, n, fail) {
			return
		}
		for _, pod := range n.orphans {
			uid := pod.UID
			err := r.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
			if err != nil && !apierrors.IsNotFound(err) {
				fail(fmt.Errorf("force-delete pod %s: %w", pod.Name, err))
				continue
			}
			r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventPodDeleted, keys.ActionDeletePod,
				"force-deleted slurmd pod %s: its Node %s is gone, so no kubelet will stop it, and Slurm node %s runs nothing", pod.Name, pod.Spec.NodeName, n.slurmName)
		}
	case actReplaceFailed:
		r.failed.Next(failedKey(ns, n.slurmName), r.failed.Clock.Now())
		r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventPodFailed, keys.ActionReplacePod, "slurmd pod %s on %s failed (%s); replacing it",
			n.pod.Name, n.nodeName, cmp.Or(n.pod.Status.Reason, n.pod.Status.Message, "no reason given"))
		r.deletePod(ctx, ns, n.pod, "it failed", fail)
	case actSetFeatures:
		if err := r.slurm.SetFeatures(ctx, n.slurmName, s.features); err != nil {
			r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventSlurmActFailed, keys.ActionSetFeatures, "set Slurm node %s's features to %s: %v", n.slurmName, strings.Join(s.features, ","), err)
			fail(fmt.Errorf("set features of %s: %w", n.slurmName, err))
			return
		}
		r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventFeaturesSet, keys.ActionSetFeatures, "set Slurm node %s's features to %s, from Node %s's labels %s",
			n.slurmName, strings.Join(s.features, ","), n.nodeName, strings.Join(ns.Spec.Slurm.FeatureLabels, ", "))
	case actSetMIGConfig:
		r.setMIGConfig(ctx, ns, n, s.layout, fail)
	case actDeleteSlurmNode:
		if !r.confirmFree(ctx, ns, n, fail) || r.claimed(ctx, n.slurmName, fail) {
			return
		}
		err := r.slurm.DeleteNode(ctx, n.slurmName)
		if err != nil && !errors.Is(err, slurmrest.ErrNotFound) {
			r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventSlurmActFailed, keys.ActionRemoveSlurmNode, "remove Slurm node %s: %v", n.slurmName, err)
			fail(fmt.Errorf("remove Slurm node %s: %w", n.slurmName, err))
			return
		}
		why := cmp.Or(s.why, "it left the NodeSet")
		r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventSlurmNodeRemoved, keys.ActionRemoveSlurmNode, "removed Slurm node %s: %s", n.slurmName, why)
	}
}

// record writes (or, for an empty record, removes) the NodeSet's record of
// its drain on the Node. A Node that is gone keeps nothing: such a node is
// never resumed.
func (r *Reconciler) record(ctx context.Context, nodeName string, rec drain.Record) error {
	if nodeName == "" {
		return nil
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	patch := client.RawPatch(types.MergePatchType, rec.MergePatch(keys.AnnotationNodeSetDrain, keys.AnnotationNodeSetDrainAt))
	if err := r.client.Patch(ctx, node, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("record the NodeSet's drain on node %s: %w", nodeName, err)
	}
	return nil
}

// confirmFree asks slurmrestd once more, live, that the node is drained and
// runs nothing: the cache may be a second old, and what follows cannot be undone.
func (r *Reconciler) confirmFree(ctx context.Context, ns *v1alpha1.NodeSet, n nodeState, fail func(error)) bool {
	// Also when the cache lacks the node: a slurmd may have registered
	// since the last poll.
	live, err := r.slurm.LiveNode(ctx, n.slurmName)
	switch {
	case errors.Is(err, slurmrest.ErrNotFound):
		return true
	case err != nil:
		fail(fmt.Errorf("check Slurm node %s: %w", n.slurmName, err))
		return false
	case !live.State.Drain() || live.State.Busy():
		r.log.Info("Slurm node changed since the cache read; not taking it away", "nodeset", ns.Name, "node", n.slurmName, "state", live.State)
		return false
	}
	return true
}

// claimed says another slurmd pod (another NodeSet's, the Node having moved
// to it) serves the Slurm node: its record stays. A pod no NodeSet owns
// claims nothing, whatever its label and annotation say.
func (r *Reconciler) claimed(ctx context.Context, slurmName string, fail func(error)) bool {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingLabels{keys.LabelComponent: keys.ComponentSlurmd}); err != nil {
		fail(fmt.Errorf("list slurmd pods: %w", err))
		return true
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || slurmnode.ServedBy(p) != slurmName {
			continue
		}
		ok, err := slurmnode.IsSlurmdPod(ctx, r.client, p)
		if err != nil {
			fail(err)
			return true
		}
		if ok {
			return true
		}
	}
	return false
}

func (r *Reconciler) deletePod(ctx context.Context, ns *v1alpha1.NodeSet, pod *corev1.Pod, why string, fail func(error)) {
	uid := pod.UID
	err := r.client.Delete(ctx, pod, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		fail(fmt.Errorf("delete pod %s: %w", pod.Name, err))
		return
	}
	r.recorder.Eventf(ns, nil, corev1.EventTypeNormal, keys.EventPodDeleted, keys.ActionDeletePod, "deleted slurmd pod %s: %s", pod.Name, why)
}

// noteWait reports a drain that outlived the NodeSet's drain timeout, once,
// and a MIG layout mig-manager failed to apply, once per layout.
func (r *Reconciler) noteWait(ns *v1alpha1.NodeSet, n nodeState, s step) {
	r.noteMIG(ns, n, s)
	if !s.busy || s.since.IsZero() {
		return
	}
	over := time.Since(s.since) > drainTimeout(ns, r.opts)
	r.mu.Lock()
	first := over && !r.timeout[n.slurmName]
	r.timeout[n.slurmName] = over
	r.mu.Unlock()
	if first {
		r.recorder.Eventf(ns, nil, corev1.EventTypeWarning, keys.EventDrainTimeout, keys.ActionDrain,
			"Slurm node %s has been drained since %s and still runs jobs; its pod stays until they end", n.slurmName, s.since.UTC().Format(time.RFC3339))
	}
}

func (r *Reconciler) timedOut(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.timeout[name]
}

// markBusy keeps the busy label in step with Slurm, so the NodeSet's
// PodDisruptionBudget refuses to evict a pod whose node runs jobs.
func (r *Reconciler) markBusy(ctx context.Context, nodes []nodeState) {
	for _, n := range nodes {
		if n.pod == nil || !n.slurm.known {
			continue
		}
		busy := n.slurm.found && n.slurm.node.State.Busy()
		if (n.pod.Labels[keys.LabelSlurmBusy] == "true") == busy {
			continue
		}
		var patch []byte
		if busy {
			patch = []byte(`{"metadata":{"labels":{"` + keys.LabelSlurmBusy + `":"true"}}}`)
		} else {
			patch = []byte(`{"metadata":{"labels":{"` + keys.LabelSlurmBusy + `":null}}}`)
		}
		if err := r.client.Patch(ctx, n.pod, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			r.log.Error(err, "marking slurmd pod busy", "pod", n.pod.Name)
		}
	}
}

// finish lets a deleted NodeSet go once nothing of it is left.
func (r *Reconciler) finish(ctx context.Context, ns *v1alpha1.NodeSet) error {
	if err := r.deletePDB(ctx, ns); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(ns, keys.FinalizerNodeSet)
	return r.client.Update(ctx, ns)
}

func countWanted(nodes []nodeState) int {
	c := 0
	for _, n := range nodes {
		if n.wanted {
			c++
		}
	}
	return c
}

func maxUnavailable(ns *v1alpha1.NodeSet, desired int) int {
	v := intstr.FromInt32(1)
	if ru := ns.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, desired, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func drainTimeout(ns *v1alpha1.NodeSet, o Options) time.Duration {
	if ns.Spec.DrainTimeout != nil && ns.Spec.DrainTimeout.Duration > 0 {
		return ns.Spec.DrainTimeout.Duration
	}
	return o.DefaultDrainTimeout
}
