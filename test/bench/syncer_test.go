package bench

import (
	"bufio"
	"bytes"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/stats"
)

const (
	benchNS        = "onepool-bench"
	syncerSamples  = 100
	drainerWorkers = 4
)

// TestBenchSyncer runs the lab's controller manager over 1,000 kwok Nodes,
// 1,000 Slurm nodes and 1,000 slurmd pods, and times both directions.
func TestBenchSyncer(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	sim := l.ExtraNodeNames()
	if len(sim) < 1000 {
		t.Fatalf("the benchmark needs ONEPOOL_LAB_EXTRA_NODES>=1000 (have %d)", len(sim))
	}
	kc, sc := withSlurmdPods(t, l, sim)

	// Idle: nothing changes; what does the controller manager cost slurmrestd?
	time.Sleep(10 * time.Second)
	r0 := scrapeSum(t, l, l.ControllerManagerMetricsURL(), "onepool_slurmrest_requests_total")
	time.Sleep(window)
	r1 := scrapeSum(t, l, l.ControllerManagerMetricsURL(), "onepool_slurmrest_requests_total")
	report("syncer_slurmrest_requests_per_min", (r1-r0)*float64(time.Minute)/float64(window), "requests/min")

	c2d := timeCordonToDrain(t, kc, sc, sim[:syncerSamples])
	reportPercentile("cordon_to_drain_p50_ms", c2d, 0.50)
	reportPercentile("cordon_to_drain_p99_ms", c2d, 0.99)
	d2a := timeDrainToAnnotation(t, l, kc, sim[syncerSamples:2*syncerSamples])
	reportPercentile("drain_to_annotation_p50_ms", d2a, 0.50)
	reportPercentile("drain_to_annotation_p99_ms", d2a, 0.99)
}

// withSlurmdPods gives each node a slurmd pod in benchNS (a previous
// run's, still going away, are cleared first; the test's end clears
// them) and returns the clients both directions are timed with.
func withSlurmdPods(t *testing.T, l *lab.Lab, nodes []string) (kubernetes.Interface, *slurmrest.Client) {
	t.Helper()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	cleanupSyncerBench(t, l, kc, nodes)
	t.Cleanup(func() { cleanupSyncerBench(t, l, kc, nodes) })
	createSlurmdPods(t, kc, c, nodes)
	return kc, sc
}

// timeCordonToDrain cordons each node in turn and times it until Slurm
// shows the node drained for the cordon.
func timeCordonToDrain(t *testing.T, kc kubernetes.Interface, sc *slurmrest.Client, nodes []string) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var c2d []time.Duration
	for _, node := range nodes {
		start := time.Now()
		if err := setCordon(ctx, kc, node, true); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := sc.GetNode(ctx, node)
			if err == nil && n.State.Drain() && n.Reason == drain.ReasonCordoned {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("cordon of %s: no Slurm drain after 30 s (last: %+v, %v)", node, n, err)
			}
			time.Sleep(20 * time.Millisecond) // finer polling would load slurmrestd more than the syncer does
		}
		c2d = append(c2d, time.Since(start))
	}
	return c2d
}

// timeDrainToAnnotation drains each node with scontrol (drainerWorkers at
// a time, as admins and health checks do) and times it until the node's
// slurmd pod (slurmd-<node> in benchNS) carries the reason.
func timeDrainToAnnotation(t *testing.T, l *lab.Lab, kc kubernetes.Interface, nodes []string) []time.Duration {
	t.Helper()
	ctx := context.Background()
	w := newPodWatcher(t, kc)
	var mu sync.Mutex
	var d2a []time.Duration
	var wg sync.WaitGroup
	for wi := 0; wi < drainerWorkers; wi++ {
		wg.Add(1)
		go func(wi int) {
			defer wg.Done()
			for i := wi; i < len(nodes); i += drainerWorkers {
				node, reason := nodes[i], fmt.Sprintf("bench admin drain %s", nodes[i])
				ch := w.expect("slurmd-"+node, reason)
				start := time.Now()
				if out, err := l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=drain", "reason="+reason); err != nil {
					t.Errorf("scontrol drain %s: %v %s", node, err, out)
					return
				}
				select {
				case at := <-ch:
					mu.Lock()
					d2a = append(d2a, at.Sub(start))
					mu.Unlock()
				case <-time.After(30 * time.Second):
					t.Errorf("drain of %s: no pod annotation after 30 s", node)
					return
				}
			}
		}(wi)
	}
	wg.Wait()
	if len(d2a) < len(nodes) {
		t.Fatalf("only %d of %d drain samples", len(d2a), len(nodes))
	}
	return d2a
}

// percentileMS is the nearest-rank percentile of d in milliseconds.
func percentileMS(d []time.Duration, p float64) float64 {
	return float64(stats.Percentile(d, p)) / float64(time.Millisecond)
}

// reportPercentile prints the nearest-rank p-percentile of d with the
// number of samples it is taken over (n=...).
func reportPercentile(name string, d []time.Duration, p float64) {
	reportN(name, percentileMS(d, p), "ms", len(d))
}

func setCordon(ctx context.Context, kc kubernetes.Interface, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	_, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func createSlurmdPods(t *testing.T, kc kubernetes.Interface, c client.Client, nodes []string) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Owned by a NodeSet, as the NodeSet controller makes them: onepool
	// takes no other pod for a slurmd pod.
	owner, err := lab.EnsureHandNodeSet(ctx, c, benchNS)
	if err != nil {
		t.Fatal(err)
	}
	err = parallelDo(8, nodes, func(node string) error {
		_, err := kc.CoreV1().Pods(benchNS).Create(ctx, lab.HandSlurmdPod(owner, benchNS, "slurmd-"+node, node), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pods, err := kc.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adopted := 0
		for _, p := range pods.Items {
			if p.Annotations[keys.AnnotationSlurmNode] != "" {
				adopted++
			}
		}
		if adopted >= len(nodes) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slurmd pods adopted by the syncer after 5 minutes", adopted, len(nodes))
		}
		time.Sleep(time.Second)
	}
}

func cleanupSyncerBench(t *testing.T, l *lab.Lab, kc kubernetes.Interface, sim []string) {
	ctx := context.Background()
	_ = parallelDo(8, sim[:syncerSamples], func(n string) error { return setCordon(ctx, kc, n, false) })
	_ = kc.CoreV1().Pods(benchNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	// Each deleted slurmd pod is held until the syncer has drained its node.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		pods, err := kc.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bench slurmd pods still there after 10 minutes")
		}
		time.Sleep(time.Second)
	}
	// Deleted slurmd pods drained their nodes: give them back in one command.
	// UNDRAIN, not RESUME: a RESUME wakes the powered-down CLOUD nodes, which
	// then stay NOT_RESPONDING and change the node table every few seconds.
	if out, err := l.Slurm(ctx, "scontrol", "update", "nodename=sim-[0000-"+fmt.Sprintf("%04d", len(sim)-1)+"]", "state=undrain"); err != nil {
		t.Logf("undrain sim nodes: %v %s", err, out)
	}
}

func parallelDo(workers int, items []string, fn func(string) error) error {
	ch := make(chan string)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := fn(it); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	close(errs)
	return <-errs
}

// scrapeSum adds every series of a counter on a Prometheus endpoint (the
// lab's https ones have self-signed certificates).
func scrapeSum(t *testing.T, l *lab.Lab, url, name string) float64 {
	t.Helper()
	b, err := l.ScrapeMetrics(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// podWatcher hands pod annotation changes to the drain that waits for them.
type podWatcher struct {
	mu    sync.Mutex
	waits map[string]podWait
}

type podWait struct {
	reason string
	ch     chan time.Time
}

func newPodWatcher(t *testing.T, kc kubernetes.Interface) *podWatcher {
	t.Helper()
	w := &podWatcher{waits: map[string]podWait{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wi, err := kc.CoreV1().Pods(benchNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if pw, ok := w.waits[p.Name]; ok && p.Annotations[keys.AnnotationSlurmReason] == pw.reason {
				pw.ch <- now
				delete(w.waits, p.Name)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *podWatcher) expect(pod, reason string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.waits[pod] = podWait{reason: reason, ch: ch}
	w.mu.Unlock()
	return ch
}
