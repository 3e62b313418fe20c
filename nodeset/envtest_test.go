package nodeset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/internal/fakeslurm"
	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
)

// The NodeSet controller against a real kube-apiserver and etcd (envtest,
// with the NodeSet CRD), Slurm behind the narrow Slurm interface, and a
// stand-in kubelet that runs the pods: Ready once made, gone once deleted,
// their slurmd registering with the fake Slurm.

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

type nodeSetEnv struct {
	t     *testing.T
	c     client.Client
	kc    kubernetes.Interface
	slurm *fakeslurm.Slurm
	ns    string
	label string
}

func newNodeSetEnv(t *testing.T) *nodeSetEnv {
	t.Helper()
	env := testenv.Start(t, filepath.Join("..", "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	id := time.Now().UnixNano() % 1e9
	e := &nodeSetEnv{t: t, slurm: fakeslurm.New(), ns: fmt.Sprintf("nodeset-%d", id), label: fmt.Sprintf("test.onepool.dev/ns-%d", id)}
	e.c = testenv.Manager(t, env, scheme, func(mgr ctrl.Manager) error {
		_, err := Setup(mgr, e.slurm, e.slurm, Options{Recheck: 200 * time.Millisecond, ShareCheck: 300 * time.Millisecond})
		return err
	})
	var err error
	e.kc, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	require.NoError(t, e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.kubelet(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// kubelet is the stand-in: every NodeSet pod turns Running and Ready (its
// slurmd registers: the Slurm node appears, or re-registers keeping its
// drain), and a deleted one goes once its grace would be over.
func (e *nodeSetEnv) kubelet(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := e.c.List(ctx, &pods, client.InNamespace(e.ns), client.HasLabels{keys.LabelNodeSet}); err == nil {
			for i := range pods.Items {
				e.runPod(ctx, &pods.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *nodeSetEnv) runPod(ctx context.Context, p *corev1.Pod) {
	switch {
	case p.DeletionTimestamp != nil:
		_ = e.c.Delete(ctx, p, client.GracePeriodSeconds(0))
	case p.Status.Phase == "" || p.Status.Phase == corev1.PodPending:
		name := slurmnode.ServedBy(p)
		n := slurmrest.Node{Name: name, State: slurmrest.NodeState{slurmrest.NodeIdle}}
		if e.slurm.Has(name) {
			n = e.slurm.Get(name)
		}
		n.SlurmdStarted = time.Now().Add(time.Second) // after the pod was made, on a second-precision clock
		e.slurm.Add(n)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		_ = e.c.Status().Update(ctx, p)
	}
}

// nodes makes Kubernetes Nodes (names of the test's own), the first
// selected ones labelled for the NodeSet; it returns their names.
func (e *nodeSetEnv) nodes(n, selected int) []string {
	e.t.Helper()
	var names []string
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-n%d", e.ns, i), Labels: map[string]string{}}}
		if i < selected {
			node.Labels[e.label] = "true"
		}
		require.NoError(e.t, e.c.Create(context.Background(), node))
		e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
		// The apiserver taints a new Node not-ready (TaintNodesByCondition);
		// no node lifecycle controller runs here to take it off.
		node.Spec.Taints = nil
		require.NoError(e.t, e.c.Update(context.Background(), node))
		names = append(names, node.Name)
	}
	return names
}

func (e *nodeSetEnv) labelNode(name string, on bool) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if on {
			n.Labels[e.label] = "true"
		} else {
			delete(n.Labels, e.label)
		}
		return e.c.Update(context.Background(), n)
	}))
}

func (e *nodeSetEnv) create(maxUnavailable int) {
	e.t.Helper()
	mu := intstr.FromInt32(int32(maxUnavailable))
	ns := &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: e.ns},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{e.label: "true"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/node-agent:test", Command: []string{"/usr/local/bin/onepool-node-agent", "run"},
			}}}},
			Slurm:          v1alpha1.SlurmNodeSpec{Partitions: []string{"gpu"}},
			UpdateStrategy: v1alpha1.UpdateStrategy{Type: v1alpha1.RollingUpdate, RollingUpdate: &v1alpha1.RollingUpdateStrategy{MaxUnavailable: &mu}},
		},
	}
	require.NoError(e.t, e.c.Create(context.Background(), ns))
}

func (e *nodeSetEnv) get() *v1alpha1.NodeSet {
	e.t.Helper()
	ns := &v1alpha1.NodeSet{}
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: "gpu"}, ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(e.t, err)
	return ns
}

// pods are the NodeSet's live pods by Node.
func (e *nodeSetEnv) pods() map[string]corev1.Pod {
	e.t.Helper()
	var list corev1.PodList
	require.NoError(e.t, e.c.List(context.Background(), &list, client.InNamespace(e.ns), client.HasLabels{keys.LabelNodeSet}))
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// converged waits until the NodeSet runs one Ready, current pod on each
// of want and its status says so.
func (e *nodeSetEnv) converged(want ...string) *v1alpha1.NodeSet {
	e.t.Helper()
	var ns *v1alpha1.NodeSet
	testenv.Eventually(e.t, 45*time.Second, fmt.Sprintf("a Ready, current slurmd pod on each of %v", want), func() (bool, string) {
		ns = e.get()
		pods := e.pods()
		st := ns.Status
		ok := len(pods) == len(want) && st.ObservedGeneration == ns.Generation && st.DesiredNodes == int32(len(want)) &&
			st.ReadyPods == int32(len(want)) && st.UpdatedPods == int32(len(want)) && st.Slurm.Known
		for _, n := range want {
			p, found := pods[n]
			ok = ok && found && p.Labels[keys.LabelTemplateHash] == st.TemplateHash && !e.slurm.Get(n).State.Drain()
		}
		return ok, fmt.Sprintf("pods %v, status %+v", podNodes(pods), st)
	})
	return ns
}

func podNodes(pods map[string]corev1.Pod) []string {
	var out []string
	for n, p := range pods {
		out = append(out, n+"="+p.Labels[keys.LabelTemplateHash])
	}
	return out
}

func (e *nodeSetEnv) hasEvent(reason, text string) (bool, string) {
	return testenv.HasEvent(e.kc, e.ns, "gpu", reason, text)
}

func (e *nodeSetEnv) pdb() *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: pdbName("gpu")}, p); err != nil {
		return nil
	}
	return p
}
