package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// HandNodeSet names the NodeSet that owns the slurmd pods the tests and
// benchmarks make by hand on the lab's static nodes (gpu-N, whose slurmd the
// lab runs itself). onepool takes a pod for a slurmd pod only when a NodeSet
// owns it, so these pods are made as the NodeSet controller makes its own:
// with a controller owner reference to a NodeSet. This NodeSet selects no
// Node, so its controller makes no pod of its own, and the hand-made pods
// carry no onepool.dev/nodeset label, so it never lists them: it drains,
// replaces and takes away none of them.
const HandNodeSet = "hand-made-slurmd"

// EnsureHandNodeSet makes HandNodeSet in namespace ns unless it is there,
// and returns the controller reference its pods carry.
func EnsureHandNodeSet(ctx context.Context, c client.Client, ns string) (metav1.OwnerReference, error) {
	if err := ServeNodeSets(ctx, c, ns); err != nil {
		return metav1.OwnerReference{}, err
	}
	want := &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: HandNodeSet, Namespace: ns},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{"lab.onepool.dev/no-node": "true"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/slurmd:lab",
			}}}},
		},
	}
	if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return metav1.OwnerReference{}, fmt.Errorf("create NodeSet %s/%s: %w", ns, HandNodeSet, err)
	}
	have := &v1alpha1.NodeSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: HandNodeSet}, have); err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("get NodeSet %s/%s: %w", ns, HandNodeSet, err)
	}
	if have.DeletionTimestamp != nil {
		return metav1.OwnerReference{}, fmt.Errorf("NodeSet %s/%s is being deleted", ns, HandNodeSet)
	}
	return *metav1.NewControllerRef(have, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind)), nil
}

// HandSlurmdPod is a slurmd pod named name in namespace ns on node, owned
// by owner (EnsureHandNodeSet's reference).
func HandSlurmdPod(owner metav1.OwnerReference, ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:          map[string]string{keys.LabelComponent: keys.ComponentSlurmd},
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "slurmd", Image: "onepool/slurmd:lab"}}},
	}
}

// ServeNodeSets makes namespace ns unless it is there and labels it as one
// that holds NodeSets: onepool's controller manager may make, delete and
// change pods there (the onepool chart's pod policy), as an admin labels
// the namespace of the slurm chart.
func ServeNodeSets(ctx context.Context, c client.Client, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{keys.LabelNodeSetNamespace: "true"}}})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, keys.LabelNodeSetNamespace)
	if err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("labelling namespace %s %s=true: %w", ns, keys.LabelNodeSetNamespace, err)
	}
	return nil
}

// StaticSlurmdNS is the namespace of the slurmd pods `make up` gives the
// lab's static nodes (StaticSlurmdPods): the syncer acts on a Slurm node
// through its slurmd pod, so without them a cordon of gpu-N would drain
// nothing on the lab a reader tries first.
const StaticSlurmdNS = "onepool-lab"

// StaticSlurmdPods gives each static node (gpu-N) a slurmd pod as the
// NodeSet controller would make it (HandSlurmdPod, in StaticSlurmdNS),
// unless it has one, and waits until the syncer has adopted each: Ready,
// annotated with its Slurm node, its finalizer on. The lab's own slurmd
// processes stay what serves Slurm; the pods stand for them.
func (l *Lab) StaticSlurmdPods(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	owner, err := EnsureHandNodeSet(ctx, c, StaticSlurmdNS)
	if err != nil {
		return err
	}
	for _, node := range l.NodeNames() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Create(cctx, HandSlurmdPod(owner, StaticSlurmdNS, "slurmd-"+node, node))
		cancel()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("slurmd pod for %s: %w", node, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, node := range l.NodeNames() {
		for {
			pod := &corev1.Pod{}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Get(cctx, types.NamespacedName{Namespace: StaticSlurmdNS, Name: "slurmd-" + node}, pod)
			cancel()
			if err == nil && adopted(pod, node) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("slurmd pod %s/slurmd-%s not adopted by the syncer within a minute (is onepool-controller-manager running?): %v", StaticSlurmdNS, node, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	return nil
}

// adopted says the syncer took pod for node's slurmd pod: Ready, its Slurm
// node annotated, its finalizer on.
func adopted(pod *corev1.Pod, node string) bool {
	ready := false
	for _, c := range pod.Status.Conditions {
		ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	}
	return ready && pod.Annotations[keys.AnnotationSlurmNode] == node && len(pod.Finalizers) > 0
}

// RemoveStaticSlurmdPods deletes StaticSlurmdPods' pods, waits until they
// are gone (the syncer drains each Slurm node first, "slurmd pod deleted",
// then lets its pod go) and resumes the drains that deleting them made:
// the lab's slurmd processes still serve those nodes.
func (l *Lab) RemoveStaticSlurmdPods(ctx context.Context) error {
	c, err := l.Client()
	if err != nil {
		return err
	}
	var errs []error
	for _, node := range l.NodeNames() {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: StaticSlurmdNS, Name: "slurmd-" + node}}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Delete(cctx, pod)
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s/%s: %w", StaticSlurmdNS, pod.Name, err))
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Get(cctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			cancel()
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("%s/%s still there a minute after its delete: %v", StaticSlurmdNS, pod.Name, err))
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		cctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		out, err := l.Slurm(cctx, "sinfo", "-h", "-n", node, "-o", "%E")
		cancel()
		if err == nil && strings.TrimSpace(string(out)) == drain.ReasonPodDeleted {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			if out, err := l.Slurm(cctx, "scontrol", "update", "nodename="+node, "state=resume"); err != nil {
				errs = append(errs, fmt.Errorf("resume %s: %w: %s", node, err, out))
			}
			cancel()
		}
	}
	return errors.Join(errs...)
}
