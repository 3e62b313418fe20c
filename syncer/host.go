package syncer

import (
	"context"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
)

// Nodes whose slurmd runs on the host (an existing Slurm cluster) have no
// slurmd pod: the Node alone speaks for its Slurm node. Their requests carry
// no namespace (a pod's always has one).

// indexHostSlurmNode indexes host-slurmd Nodes by their Slurm node.
const indexHostSlurmNode = "onepool.hostSlurmNode"

// hostNode says whether the syncer acts on n as a host-slurmd Node.
func (r *PodReconciler) hostNode(n *corev1.Node) bool {
	return r.opts.HostNodes != nil && !r.opts.HostNodes.Empty() && r.opts.HostNodes.Matches(labels.Set(n.Labels))
}

func hostRequest(node string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: node}}
}

func isHostRequest(req reconcile.Request) bool { return req.Namespace == "" }

// hostRequests maps a Slurm node to the host-slurmd Nodes that name it
// (every one when slurmName is empty).
func (r *PodReconciler) hostRequests(ctx context.Context, slurmName string) []reconcile.Request {
	if r.opts.HostNodes == nil || r.opts.HostNodes.Empty() {
		return nil
	}
	var opts []client.ListOption
	if slurmName != "" {
		opts = append(opts, client.MatchingFields{indexHostSlurmNode: slurmName})
	}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes, opts...); err != nil {
		r.log.Error(err, "listing Nodes from the informer cache")
		return nil
	}
	var reqs []reconcile.Request
	for i := range nodes.Items {
		if r.hostNode(&nodes.Items[i]) {
			reqs = append(reqs, hostRequest(nodes.Items[i].Name))
		}
	}
	return reqs
}

// reconcileHost brings a host-slurmd Node's Slurm node and the Node in
// line: the Node's cordon drains, Slurm's drain or DOWN state is mirrored
// on the Node. A Node the selector no longer matches is left as it is, and
// so is its Slurm node.
func (r *PodReconciler) reconcileHost(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.client.Get(ctx, req.NamespacedName, node); err != nil {
		r.observeLag(req.NamespacedName, "", false)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.hostNode(node) {
		r.observeLag(req.NamespacedName, "", false)
		return ctrl.Result{}, nil
	}
	slurmName := slurmnode.Of(node)
	other, err := r.otherClaim(ctx, node, slurmName)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case other == podHere:
		r.observeLag(req.NamespacedName, "", false)
		return ctrl.Result{}, nil
	case other != "":
		r.observeLag(req.NamespacedName, "", false)
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, keys.EventSlurmNodeShared, keys.ActionSync,
			"Slurm node %s is named by %s too; onepool acts on neither for it", slurmName, other)
		return ctrl.Result{RequeueAfter: r.opts.Resync}, nil
	}
	st, err := r.slurm.Node(slurmName)
	switch {
	case errors.Is(err, slurmrest.ErrNotFound):
		r.metrics.actions.WithLabelValues(dirToSlurm, actionNone, outcomeUnknown).Inc()
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, keys.EventSlurmUnavailable, keys.ActionSync,
			"Slurm has no node %q for this host-slurmd Node; nothing is changed", slurmName)
		return ctrl.Result{RequeueAfter: r.opts.Resync}, nil
	case err != nil:
		r.metrics.actions.WithLabelValues(dirToSlurm, actionNone, outcomeUnknown).Inc()
		r.log.V(1).Info("Slurm state unknown; changing nothing", "node", node.Name, "slurmNode", slurmName, "error", err.Error())
		return ctrl.Result{RequeueAfter: r.opts.UnknownRetry}, nil
	}
	return r.act(ctx, req.NamespacedName, nil, node, slurmName, st)
}

// podHere is otherClaim's answer when a slurmd pod on the Node itself
// serves its Slurm node: the pod's path governs, the host path steps aside.
const podHere = "-"

// otherClaim names what else speaks for slurmName: another host-slurmd
// Node, or a slurmd pod on another Node (podHere: one on this Node).
func (r *PodReconciler) otherClaim(ctx context.Context, node *corev1.Node, slurmName string) (string, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{indexSlurmNode: slurmName}); err != nil {
		return "", err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[keys.LabelComponent] != keys.ComponentSlurmd || p.Spec.NodeName == "" {
			continue
		}
		trusted, err := slurmnode.IsSlurmdPod(ctx, r.client, p)
		if err != nil {
			return "", err
		}
		if !trusted {
			continue
		}
		if p.Spec.NodeName == node.Name {
			return podHere, nil
		}
		return "slurmd pod " + p.Namespace + "/" + p.Name + " on Node " + p.Spec.NodeName, nil
	}
	var others []string
	for _, req := range r.hostRequests(ctx, slurmName) {
		if req.Name != node.Name {
			others = append(others, "Node "+req.Name)
		}
	}
	slices.Sort(others)
	if len(others) > 0 {
		return others[0], nil
	}
	return "", nil
}

// hostIndex is the Node index of indexHostSlurmNode.
func (r *PodReconciler) hostIndex(o client.Object) []string {
	if n := o.(*corev1.Node); r.hostNode(n) {
		return []string{slurmnode.Of(n)}
	}
	return nil
}
