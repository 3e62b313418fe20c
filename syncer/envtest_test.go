package syncer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// The syncer's reconciler against a real kube-apiserver and etcd (envtest:
// the lab's binaries through KUBEBUILDER_ASSETS, which `make unit` sets),
// with Slurm behind the narrow Slurm interface: the decisions the lab's e2e
// covers, here without the lab.

// fakeSlurm is Slurm's node table as the syncer sees it.
type fakeSlurm struct {
	mu      sync.Mutex
	nodes   map[string]slurmrest.Node
	stale   bool
	drains  int
	resumes int
}

func newFakeSlurm(names ...string) *fakeSlurm {
	f := &fakeSlurm{nodes: map[string]slurmrest.Node{}}
	for _, n := range names {
		f.nodes[n] = slurmrest.Node{Name: n, State: slurmrest.NodeState{slurmrest.NodeIdle}}
	}
	return f
}

func (f *fakeSlurm) Node(name string) (slurmrest.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return slurmrest.Node{}, slurmrest.ErrStale
	}
	n, ok := f.nodes[name]
	if !ok {
		return slurmrest.Node{}, slurmrest.ErrNotFound
	}
	return n, nil
}

func (f *fakeSlurm) SyncedAt() time.Time { return time.Now() }

func (f *fakeSlurm) LiveNode(_ context.Context, name string) (slurmrest.Node, error) {
	f.mu.Lock()
	stale := f.stale
	f.mu.Unlock()
	if stale {
		return slurmrest.Node{}, slurmrest.ErrUnreachable
	}
	return f.Node(name)
}

func (f *fakeSlurm) Drain(_ context.Context, name, reason string) error {
	return f.set(name, true, reason, "slurm")
}

func (f *fakeSlurm) Resume(_ context.Context, name string) error {
	return f.set(name, false, "", "slurm")
}

// set drains or resumes a node as the user by would (an admin: "root").
func (f *fakeSlurm) set(name string, drain bool, reason, by string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return slurmrest.ErrUnreachable
	}
	n, ok := f.nodes[name]
	if !ok {
		return slurmrest.ErrNotFound
	}
	st := slurmrest.NodeState{n.State.Base()}
	if drain {
		st = append(st, "DRAIN")
		n.Reason, n.ReasonSetByUser, n.ReasonChanged = reason, by, time.Now().Truncate(time.Second)
		if by == "slurm" {
			f.drains++
		}
	} else if by == "slurm" {
		f.resumes++
	}
	n.State = st
	f.nodes[name] = n
	return nil
}

func (f *fakeSlurm) get(name string) slurmrest.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[name]
}

func (f *fakeSlurm) setStale(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale = v
}

// syncerEnv is one test's apiserver, manager and fake Slurm.
type syncerEnv struct {
	t     *testing.T
	c     client.Client
	kc    kubernetes.Interface
	slurm *fakeSlurm
	ns    string
}

var (
	envOnce sync.Once
	envCfg  *envtest.Environment
	envErr  error
)

// startAPIServer starts one kube-apiserver and etcd for the package's tests.
func startAPIServer(t *testing.T) *envtest.Environment {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS unset: run `make unit` (it builds kube-apiserver and etcd into .lab/bin)")
	}
	envOnce.Do(func() {
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		var log bytes.Buffer
		api := env.ControlPlane.GetAPIServer()
		api.Out, api.Err = &log, &log
		api.Configure().Set("advertise-address", "127.0.0.1")
		if _, err := env.Start(); err != nil {
			envErr = fmt.Errorf("%w; kube-apiserver said: %s", err, log.String())
			return
		}
		envCfg = env
	})
	require.NoError(t, envErr)
	return envCfg
}

func TestMain(m *testing.M) {
	// controller-runtime's and client-go's own logs stay out of go test's.
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if envCfg != nil {
		_ = envCfg.Stop()
	}
	os.Exit(code)
}

// newSyncerEnv runs the syncer (its own manager, short resync) over a
// namespace of its own, with Slurm nodes names.
func newSyncerEnv(t *testing.T, opts Options, names ...string) *syncerEnv {
	t.Helper()
	env := startAPIServer(t)
	ctrl.SetLogger(logr.Discard())
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 clientgoscheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	require.NoError(t, err)
	e := &syncerEnv{t: t, slurm: newFakeSlurm(names...), ns: fmt.Sprintf("syncer-%d", time.Now().UnixNano()%1e9)}
	if opts.Resync == 0 {
		opts.Resync = time.Second
	}
	_, err = Setup(mgr, e.slurm, nil, prometheus.NewRegistry(), opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	e.c, err = client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	e.kc, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	require.NoError(t, e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}))
	return e
}

// nodeWithPod makes a Node and a Ready slurmd pod bound to it, and waits
// until the syncer has adopted the pod (finalizer, Slurm node annotation).
// The Node's name is the test's own; its label names Slurm node name.
func (e *syncerEnv) nodeWithPod(name string) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + e.ns, Labels: map[string]string{keys.LabelSlurmNodeName: name}}}
	require.NoError(e.t, e.c.Create(ctx, node))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), node) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-" + name, Namespace: e.ns, Labels: SlurmdPodSelector()},
		Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "slurmd", Image: "slurmd"}}},
	}
	require.NoError(e.t, e.c.Create(ctx, pod))
	e.setReady(pod.Name, true)
	e.eventually(10*time.Second, "the syncer adopts the pod", func() (bool, string) {
		p := e.pod(pod.Name)
		return p != nil && len(p.Finalizers) > 0 && p.Annotations[keys.AnnotationSlurmNode] != "", fmt.Sprintf("%+v", p)
	})
	return e.pod(pod.Name)
}

func (e *syncerEnv) setReady(pod string, ready bool) {
	e.t.Helper()
	p := e.pod(pod)
	require.NotNil(e.t, p)
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	require.NoError(e.t, e.c.Status().Update(context.Background(), p))
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
	require.NoError(e.t, e.c.Update(context.Background(), n))
}

func (e *syncerEnv) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("%s: not after %s (last: %s)", what, timeout, last)
}

// holds checks that cond stays true for d.
func (e *syncerEnv) holds(d time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ok, state := cond(); !ok {
			e.t.Fatalf("%s: stopped holding: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slurmIs waits until the fake Slurm node is drained with reason, or not
// drained (reason "").
func (e *syncerEnv) slurmIs(name, reason string) {
	e.t.Helper()
	e.eventually(10*time.Second, fmt.Sprintf("Slurm node %s drained with %q", name, reason), func() (bool, string) {
		n := e.slurm.get(name)
		if reason == "" {
			return !n.State.Drain(), fmt.Sprintf("%v %q", n.State, n.Reason)
		}
		return n.State.Drain() && n.Reason == reason, fmt.Sprintf("%v %q", n.State, n.Reason)
	})
}

// hasEvent says whether an object got an event with reason whose message
// holds text.
func (e *syncerEnv) hasEvent(ns, name, reason, text string) (bool, string) {
	evs, err := e.kc.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.Reason == reason && strings.Contains(ev.Message, text) {
			return true, ""
		}
		seen = append(seen, ev.Reason+": "+ev.Message)
	}
	return false, strings.Join(seen, " | ")
}
