package syncer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/internal/fakeslurm"
	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// The syncer's reconciler against a real kube-apiserver and etcd (envtest:
// the lab's binaries through KUBEBUILDER_ASSETS, which `make unit` sets),
// with Slurm behind the narrow Slurm interface: the decisions the lab's e2e
// covers, here without the lab. The NodeSet CRD is installed: a slurmd pod
// is one a NodeSet owns. No NodeSet controller runs; the tests' NodeSet
// selects no Node and owns the pods the tests make.

// syncerEnv is one test's apiserver, manager and fake Slurm.
type syncerEnv struct {
	t     *testing.T
	c     client.Client
	kc    kubernetes.Interface
	slurm *fakeslurm.Slurm
	ns    string
	owner *v1alpha1.NodeSet // owns the test's slurmd pods
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// newSyncerEnv runs the syncer (its own manager, short resync) over a
// namespace of its own, with Slurm nodes names, and makes the NodeSet that
// owns the namespace's slurmd pods.
func newSyncerEnv(t *testing.T, opts Options, names ...string) *syncerEnv {
	t.Helper()
	env := testenv.Start(t, filepath.Join("..", "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	e := &syncerEnv{t: t, slurm: fakeslurm.New(names...), ns: fmt.Sprintf("syncer-%d", time.Now().UnixNano()%1e9)}
	if opts.Resync == 0 {
		opts.Resync = time.Second
	}
	e.c = testenv.Manager(t, env, scheme, func(mgr ctrl.Manager) error {
		_, err := Setup(mgr, e.slurm, e.slurm, prometheus.NewRegistry(), opts)
		return err
	})
	var err error
	e.kc, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}))
	e.owner = &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd", Namespace: e.ns},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{"test.onepool.dev/no-node": "true"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/node-agent:test",
			}}}},
		},
	}
	require.NoError(t, e.c.Create(ctx, e.owner))
	return e
}

// nodeWithPod makes a Node and a Ready slurmd pod bound to it, and waits
// until the syncer has adopted the pod (finalizer, Slurm node annotation).
// The Node's name is the test's own; its label names Slurm node name.
func (e *syncerEnv) nodeWithPod(name string) *corev1.Pod {
	e.t.Helper()
	ref := e.ownerRef()
	pod := e.podOnNode(name, &ref)
	e.eventually(30*time.Second, "the syncer adopts the pod", func() (bool, string) {
		p := e.pod(pod.Name)
		return p != nil && len(p.Finalizers) > 0 && p.Annotations[keys.AnnotationSlurmNode] != "", fmt.Sprintf("%+v", p)
	})
	return e.pod(pod.Name)
}

// ownerRef is the controller reference the NodeSet controller writes on
// the pods of the test's NodeSet.
func (e *syncerEnv) ownerRef() metav1.OwnerReference {
	return *metav1.NewControllerRef(e.owner, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind))
}

// podOnNode makes a Node for Slurm node name and a Ready pod with the
// slurmd label bound to it, with controller reference owner (nil: none,
// a pod anyone could make).
func (e *syncerEnv) podOnNode(name string, owner *metav1.OwnerReference) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + e.ns, Labels: map[string]string{keys.LabelSlurmNodeName: name}}}
	require.NoError(e.t, e.c.Create(ctx, node))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-" + name, Namespace: e.ns, Labels: SlurmdPodSelector()},
		Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "slurmd", Image: "slurmd"}}},
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	require.NoError(e.t, e.c.Create(ctx, pod))
	e.setReady(pod.Name, true)
	return e.pod(pod.Name)
}

func (e *syncerEnv) setReady(pod string, ready bool) {
	e.t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	// The syncer writes a new pod too: on a conflict, read it again.
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := e.pod(pod)
		require.NotNil(e.t, p)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
		return e.c.Status().Update(context.Background(), p)
	}))
}

func (e *syncerEnv) pod(name string) *corev1.Pod {
	p := &corev1.Pod{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	return p
}

func (e *syncerEnv) node(name string) *corev1.Node {
	n := &corev1.Node{}
	require.NoError(e.t, e.c.Get(context.Background(), types.NamespacedName{Name: name}, n))
	return n
}

// cordon cordons (words != nil) or uncordons a Node, as kubectl would,
// with the operator's words in onepool's annotation.
func (e *syncerEnv) cordon(node string, on bool, words string) {
	e.t.Helper()
	// The syncer writes the Node too: on a conflict, read it again.
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := e.node(node)
		n.Spec.Unschedulable = on
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if on && words != "" {
			n.Annotations[keys.AnnotationCordonReason] = words
		} else {
			delete(n.Annotations, keys.AnnotationCordonReason)
		}
		return e.c.Update(context.Background(), n)
	}))
}

func (e *syncerEnv) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	testenv.Eventually(e.t, timeout, what, cond)
}

func (e *syncerEnv) holds(d time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	testenv.Holds(e.t, d, what, cond)
}

// slurmIs waits until the fake Slurm node is drained with reason, or not
// drained (reason "").
func (e *syncerEnv) slurmIs(name, reason string) {
	e.t.Helper()
	e.eventually(30*time.Second, fmt.Sprintf("Slurm node %s drained with %q", name, reason), func() (bool, string) {
		n := e.slurm.Get(name)
		if reason == "" {
			return !n.State.Drain(), fmt.Sprintf("%v %q", n.State, n.Reason)
		}
		return n.State.Drain() && n.Reason == reason, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
}

// hasEvent says whether an object got an event with reason whose message
// holds text.
func (e *syncerEnv) hasEvent(ns, name, reason, text string) (bool, string) {
	return testenv.HasEvent(e.kc, ns, name, reason, text)
}
