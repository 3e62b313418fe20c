package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

const (
	schedNS          = "onepool-bench-sched"
	schedLatencyPods = 100
	schedBurstPods   = 200
	schedEvictions   = 50
)

// TestBenchScheduler times onepool's scheduler on at least 32 real slurmd:
// pod creation until bound (one at a time, idle cluster), a burst of
// one-GPU pods, and scancel until the pod is gone.
func TestBenchScheduler(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	if n := len(l.NodeNames()); n < 32 {
		t.Fatalf("the benchmark needs ONEPOOL_LAB_NODES>=32 real slurmd (have %d)", n)
	}
	ctx := context.Background()
	kc, sc := benchClients(t, l)
	cleanupSchedBench(t, kc, sc)
	t.Cleanup(func() { cleanupSchedBench(t, kc, sc) })
	w := watchSchedPods(t, kc)
	benchIdleRequests(t)

	// One pod at a time on an idle cluster.
	var lat []time.Duration
	for i := range schedLatencyPods {
		name := fmt.Sprintf("lat-%03d", i)
		start := time.Now()
		createGPUPod(t, kc, name)
		at := w.waitBound(t, name, 30*time.Second)
		lat = append(lat, at.Sub(start))
	}
	reportPercentile("pod_to_bound_p50_ms", lat, 0.50)
	reportPercentile("pod_to_bound_p99_ms", lat, 0.99)
	cleanupSchedBench(t, kc, sc)
	benchConstrained(t, kc, w, l.NodeNames())
	cleanupSchedBench(t, kc, sc)

	// A burst: every pod created at once by 16 clients.
	names := make([]string, schedBurstPods)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%03d", i)
	}
	start := time.Now()
	if err := parallelDo(16, names, func(n string) error { createGPUPod(t, kc, n); return nil }); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, n := range names {
		if at := w.waitBound(t, n, 2*time.Minute); at.After(last) {
			last = at
		}
	}
	report("pods_bound_per_sec", float64(schedBurstPods)/last.Sub(start).Seconds(), "pods/s")

	// scancel (the same DELETE /job scancel sends) until the pod is gone.
	var ev []time.Duration
	for _, n := range names[:schedEvictions] {
		p, err := kc.CoreV1().Pods(schedNS).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32)
		if err != nil {
			t.Fatalf("pod %s records no job id: %v", n, err)
		}
		start := time.Now()
		if err := sc.CancelJob(ctx, uint32(id)); err != nil {
			t.Fatal(err)
		}
		ev = append(ev, w.waitGone(t, n, 30*time.Second).Sub(start))
	}
	reportPercentile("job_end_to_pod_evicted_p50_ms", ev, 0.50)
	reportPercentile("job_end_to_pod_evicted_p99_ms", ev, 0.99)
	cleanupSchedBench(t, kc, sc)

	benchPreemption(t, kc, sc, w, len(l.NodeNames()))
}

// benchClients are a Kubernetes client that does not throttle a burst and
// a slurmrestd client, both to the lab.
func benchClients(t *testing.T, l *lab.Lab) (kubernetes.Interface, *slurmrest.Client) {
	t.Helper()
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	sc, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg), sc
}

func createGPUPod(t *testing.T, kc kubernetes.Interface, name string) { createPod(t, kc, name, 1) }

// schedWatcher records when each pod was first seen bound, terminating
// (a deletionTimestamp, or gone) and gone.
type schedWatcher struct {
	mu          sync.Mutex
	bound       map[string]time.Time
	terminating map[string]time.Time
	gone        map[string]time.Time
	jobID       map[string]string // the pod's slurm.onepool.dev/job-id, last seen
}

func watchSchedPods(t *testing.T, kc kubernetes.Interface) *schedWatcher {
	w := &schedWatcher{bound: map[string]time.Time{}, terminating: map[string]time.Time{}, gone: map[string]time.Time{}, jobID: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// An informer re-lists and re-watches when the API server ends a
	// watch; a bare watch silently stops delivering.
	f := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(schedNS))
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		if _, ok := w.bound[p.Name]; !ok && p.Spec.NodeName != "" {
			w.bound[p.Name] = now
		}
		if _, ok := w.terminating[p.Name]; !ok && p.DeletionTimestamp != nil {
			w.terminating[p.Name] = now
		}
		if id := p.Annotations[keys.AnnotationJobID]; id != "" {
			w.jobID[p.Name] = id
		}
		w.mu.Unlock()
	}
	_, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				now := time.Now()
				w.mu.Lock()
				w.gone[p.Name] = now
				if _, ok := w.terminating[p.Name]; !ok {
					w.terminating[p.Name] = now
				}
				w.mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

func (w *schedWatcher) wait(t *testing.T, m map[string]time.Time, name, what string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		at, ok := m[name]
		w.mu.Unlock()
		if ok {
			return at
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pod %s not %s within %s", name, what, timeout)
	return time.Time{}
}

func (w *schedWatcher) waitBound(t *testing.T, name string, timeout time.Duration) time.Time {
	return w.wait(t, w.bound, name, "bound", timeout)
}

// waitTerminatingAny waits until one of names not seen terminating before
// the call is, and returns it and when.
func (w *schedWatcher) waitTerminatingAny(t *testing.T, names []string, timeout time.Duration) (string, time.Time) {
	t.Helper()
	w.mu.Lock()
	before := map[string]bool{}
	for n := range w.terminating {
		before[n] = true
	}
	w.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		for _, n := range names {
			if at, ok := w.terminating[n]; ok && !before[n] {
				w.mu.Unlock()
				return n, at
			}
		}
		w.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("none of %d pods began terminating within %s", len(names), timeout)
	return "", time.Time{}
}

func (w *schedWatcher) waitGone(t *testing.T, name string, timeout time.Duration) time.Time {
	return w.wait(t, w.gone, name, "gone", timeout)
}

// cleanupSchedBench deletes the bench's pods and waits until Slurm runs
// none of their placeholder jobs.
func cleanupSchedBench(t *testing.T, kc kubernetes.Interface, sc *slurmrest.Client) {
	ensureSchedNS(t, kc)
	cleanupBenchPods(t, kc, sc, schedNS)
}

// ensureSchedNS makes the bench's namespace. kwok nodes publish no DRA
// devices: the device-plugin way (also on a namespace an older bench made
// without the label).
func ensureSchedNS(t *testing.T, kc kubernetes.Interface) {
	ctx := context.Background()
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: schedNS,
		Labels: map[string]string{lab.LabelGPUClaims: lab.GPUClaimsDisabled}}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, lab.LabelGPUClaims, lab.GPUClaimsDisabled)
		_, err = kc.CoreV1().Namespaces().Patch(ctx, schedNS, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatalf("bench namespace %s: %v", schedNS, err)
	}
}

// cleanupBenchPods deletes a namespace's pods and waits until they are
// gone and Slurm runs none of their placeholder jobs.
func cleanupBenchPods(t *testing.T, kc kubernetes.Interface, sc *slurmrest.Client, ns string) {
	ctx := context.Background()
	zero := int64(0)
	if err := kc.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		l, err := sc.ListJobs(ctx, time.Time{})
		active := 0
		if err == nil {
			for _, j := range l.Jobs {
				if strings.HasPrefix(j.Comment, "onepool:pod="+ns+"/") && (!j.State.Finished() || j.State.Has("COMPLETING")) {
					active++
				}
			}
		}
		pods, perr := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && perr == nil && active == 0 && len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bench cleanup of %s: %d placeholder jobs active, pods left %v (%v %v)", ns, active, len(pods.Items), err, perr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// benchConstrained: one pod at a time whose nodeSelector matches 1 of the
// nodes (the last, which Slurm would pick last on an idle cluster), as many
// as that node has GPUs; to bound on that node. Beside pod_to_bound, what
// node constraints cost (the filters at submission, Slurm's node names,
// the exclusion list).
func benchConstrained(t *testing.T, kc kubernetes.Interface, w *schedWatcher, nodes []string) {
	ctx := context.Background()
	pick := nodes[len(nodes)-1]
	const key = "bench.onepool.dev/pick"
	label := func(v string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
		if _, err := kc.CoreV1().Nodes().Patch(ctx, pick, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(`"yes"`)
	defer label("null")
	var lat []time.Duration
	for i := range lab.GPUsPerNode {
		name := fmt.Sprintf("picky-%03d", i)
		p := gpuPod(name, 1)
		p.Spec.NodeSelector = map[string]string{key: "yes"}
		start := time.Now()
		if _, err := kc.CoreV1().Pods(schedNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		at := w.waitBound(t, name, 30*time.Second)
		got, err := kc.CoreV1().Pods(schedNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != pick {
			t.Fatalf("%s bound to %s, not %s (the only node its selector matches)", name, got.Spec.NodeName, pick)
		}
		lat = append(lat, at.Sub(start))
	}
	reportPercentile("constrained_pod_to_bound_p50_ms", lat, 0.50)
}
