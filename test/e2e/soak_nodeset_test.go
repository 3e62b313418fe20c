package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmrest"
)

// The soak's NodeSet: slurmd pods the NodeSet controller runs (through the
// lab kubelet, real slurmd registering dynamic nodes) on the lab's
// dynamic nodes, scaled by relabelling Nodes and rolled by template
// changes while Slurm jobs run on them.

const soakNodeSet = "soak"

func (s *soak) nodeSetEnv() *nodeSetEnv {
	// The agent's DRA driver publishes each node's GPUs for the claim pods.
	return &nodeSetEnv{t: s.t, l: s.l, c: s.c, name: soakNodeSet, label: "e2e.onepool.dev/nodeset-" + soakNodeSet,
		env: []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}}
}

// startNodeSet applies the NodeSet over the first two dynamic nodes.
func (s *soak) startNodeSet(ctx context.Context) error {
	e := s.nodeSetEnv()
	// The soak may be the first to use the lab (`make soak` alone).
	if err := ensureNodeSetNamespace(ctx, s.c); err != nil {
		return err
	}
	e.cleanup() // a run that died may have left it
	for _, n := range s.l.DynNodeNames()[:2] {
		if err := s.labelDyn(ctx, n, true); err != nil {
			return err
		}
	}
	// The teardown removes it, after the claim pods whose jobs hold its
	// nodes.
	return s.c.Create(ctx, e.nodeSet(1))
}

func (s *soak) nodeSetOps() []soakOp {
	return []soakOp{
		{"nodeset scaled (Node relabelled)", 4, s.opScaleNodeSet},
		{"nodeset template changed", 3, s.opNodeSetTemplate},
		{"slurm job on the nodeset", 8, s.opSubmitDyn},
	}
}

func (s *soak) labelDyn(ctx context.Context, node string, on bool) error {
	var v any
	if on {
		v = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{s.nodeSetEnv().label: v}}})
	_, err := s.kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (s *soak) opScaleNodeSet(ctx context.Context) error {
	dyn := s.l.DynNodeNames()
	n := dyn[s.rng.IntN(len(dyn))]
	node, err := s.kc.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return s.labelDyn(ctx, n, node.Labels[s.nodeSetEnv().label] == "")
}

func (s *soak) opNodeSetTemplate(ctx context.Context) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{"soak.onepool.dev/revision": fmt.Sprint(s.step)}}}}})
	ns := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: soakNodeSet, Namespace: nodeSetNS}}
	return s.c.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch))
}

// opSubmitDyn runs a short job on the NodeSet's partition: its nodes must
// wait for such jobs before any slurmd pod goes.
func (s *soak) opSubmitDyn(ctx context.Context) error {
	gpus := []int{1, 2, 8}[s.rng.IntN(3)]
	out, err := s.l.Slurm(ctx, "sbatch", "--parsable", "-J", "e2e-"+soakNodeSet, "-p", dynPartition,
		fmt.Sprintf("--gres=gpu:%d", gpus), "-o", "/dev/null", "--wrap", fmt.Sprintf("sleep %d", 10+s.rng.IntN(30)))
	if err != nil {
		return fmt.Errorf("sbatch: %w: %s", err, out)
	}
	return nil
}

// watchNodeSetPods checks every slurmd pod the NodeSet controller
// deletes: never one whose node still runs jobs.
func (s *soak) watchNodeSetPods(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(s.kc, 0, informers.WithNamespace(nodeSetNS))
	inf := f.Core().V1().Pods().Informer()
	seen := map[types.UID]bool{}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		p, ok := o.(*corev1.Pod)
		if !ok || p.DeletionTimestamp == nil || p.Labels[keys.LabelNodeSet] != soakNodeSet || seen[p.UID] {
			return
		}
		seen[p.UID] = true
		go s.checkSlurmdPodDeletion(ctx, p.DeepCopy())
	}})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

func (s *soak) checkSlurmdPodDeletion(ctx context.Context, p *corev1.Pod) {
	if p.Status.Phase == corev1.PodFailed {
		return // replaced: no slurmd ran in it
	}
	name := p.Annotations[keys.AnnotationSlurmNode]
	if name == "" {
		name = p.Spec.NodeName
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	n, err := s.sc.GetNode(cctx, name)
	if errors.Is(err, slurmrest.ErrNotFound) {
		// The record went with the pod (a node that left, or was updated:
		// registered afresh by the new pod). Slurm refuses to delete a node
		// a job runs on, so none ran there.
		s.mu.Lock()
		s.slurmdDeletionsChecked++
		s.mu.Unlock()
		return
	}
	if err != nil {
		s.t.Logf("soak: slurmd pod %s deleted; Slurm node %s cannot be read: %v", p.Name, name, err)
		return
	}
	s.mu.Lock()
	s.slurmdDeletionsChecked++
	s.mu.Unlock()
	if n.State.Busy() {
		s.violate("no slurmd pod removed from a node with running jobs",
			fmt.Sprintf("pod %s on %s deleted; Slurm node %s is %v (reason %q, GRES used %s)", p.Name, p.Spec.NodeName, name, n.State, n.Reason, n.GresUsed))
	}
}

// nodeSetProblems: the NodeSet's status says what sinfo says of its nodes:
// those it selects and those it still holds a slurmd pod on (a node that
// left keeps its pod while a job runs there, a claim pod's for one).
func (s *soak) nodeSetProblems(ctx context.Context, v slurmView, kn []corev1.Node) []string {
	var ns v1alpha1.NodeSet
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: nodeSetNS, Name: soakNodeSet}, &ns); err != nil {
		return []string{"nodeset: " + err.Error()}
	}
	pods, err := s.kc.CoreV1().Pods(nodeSetNS).List(ctx, metav1.ListOptions{LabelSelector: keys.LabelNodeSet + "=" + soakNodeSet})
	if err != nil {
		return []string{"nodeset pods: " + err.Error()}
	}
	holds := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			holds[p.Spec.NodeName] = true
		}
	}
	want := v1alpha1.SlurmCounts{Known: true}
	selected := int32(0)
	for _, n := range kn {
		wanted := n.Labels[s.nodeSetEnv().label] == "true"
		if (!wanted && !holds[n.Name]) || !slices.Contains(s.l.DynNodeNames(), n.Name) {
			continue
		}
		if wanted {
			selected++
		}
		sn, ok := v.nodes[n.Name]
		switch {
		case !ok:
			if wanted {
				want.Missing++
			}
		case sn.State.Drain():
			want.Drained++
		case sn.State.Base() == slurmrest.NodeDown || sn.State.Has("NOT_RESPONDING"):
			want.Down++
		case sn.State.Busy():
			want.Allocated++
		default:
			want.Idle++
		}
	}
	st := ns.Status
	if st.ObservedGeneration != ns.Generation || st.DesiredNodes != selected || st.Slurm != want {
		return []string{fmt.Sprintf("nodeset: generation %d observed %d, desired %d of %d selected, slurm %+v, sinfo %+v",
			ns.Generation, st.ObservedGeneration, st.DesiredNodes, selected, st.Slurm, want)}
	}
	return nil
}
