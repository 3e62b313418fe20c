package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// staleRetry is how soon an unknown Slurm state is looked at again.
const staleRetry = 5 * time.Second

// Reconcile writes topology.conf when it differs. With Slurm's state
// unknown it writes nothing: a node missing from the file gets no jobs.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	snodes, err := r.slurm.Nodes()
	if errors.Is(err, slurmrest.ErrStale) {
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("slurm nodes: %w", err)
	}
	var knodes corev1.NodeList
	if err := r.client.List(ctx, &knodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("nodes: %w", err)
	}
	byName := make(map[string]*corev1.Node, len(knodes.Items))
	for i := range knodes.Items {
		byName[knodes.Items[i].Name] = &knodes.Items[i]
	}
	in := make([]Node, 0, len(snodes))
	for _, sn := range snodes {
		n := Node{Name: sn.Name}
		if k := byName[sn.Name]; k != nil {
			n.Labels = k.Labels
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
		}
		in = append(in, n)
	}
	conf, problems := Render(r.opts.Levels, in)
	r.report(problems, byName)
	if err := r.write(ctx, conf); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.opts.Resync}, nil
}

// write creates or updates the ConfigMap's topology.conf, keeping its other
// keys, labels and annotations.
func (r *Reconciler) write(ctx context.Context, conf string) error {
	var cm corev1.ConfigMap
	err := r.reader.Get(ctx, r.opts.ConfigMap, &cm)
	if apierrors.IsNotFound(err) {
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.ConfigMap.Namespace, Name: r.opts.ConfigMap.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "onepool-topology"}},
			Data: map[string]string{ConfKey: conf},
		}
		if err := r.client.Create(ctx, &cm); err != nil {
			return fmt.Errorf("create ConfigMap %s: %w", r.opts.ConfigMap, err)
		}
		r.log.Info("topology.conf written", "configMap", r.opts.ConfigMap.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s: %w", r.opts.ConfigMap, err)
	}
	if cm.Data[ConfKey] == conf {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[ConfKey] = conf
	if err := r.client.Update(ctx, &cm); err != nil {
		return fmt.Errorf("update ConfigMap %s: %w", r.opts.ConfigMap, err)
	}
	r.log.Info("topology.conf updated", "configMap", r.opts.ConfigMap.String())
	return nil
}

// report makes a Warning event on the Node for each new problem (and logs
// the ones without a Node); a problem already reported is not repeated.
func (r *Reconciler) report(problems []Problem, nodes map[string]*corev1.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := map[string]string{}
	for _, p := range problems {
		now[p.Node] = p.Message
		if r.reported[p.Node] == p.Message {
			continue
		}
		if k := nodes[p.Node]; k != nil {
			r.recorder.Eventf(k, nil, corev1.EventTypeWarning, p.Reason, keys.ActionSync, "%s", p.Message)
		} else {
			r.log.Info("Slurm node without a Kubernetes Node", "node", p.Node, "topology", p.Message)
		}
	}
	r.reported = now
}
