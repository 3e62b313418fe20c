package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/test/lab"
)

const (
	// benchNodeSetNodes is the NodeSet's size unless
	// ONEPOOL_BENCH_NODESET_NODES says (bench-scale: 2,000).
	benchNodeSetNodes = 500
	benchNodeSetNS    = "onepool-bench-nodeset"
	benchNodeSetLabel = "bench.onepool.dev/nodeset"
	reconcileMetric   = "controller_runtime_reconcile_time_seconds_bucket"
)

// TestBenchNodeSet applies a NodeSet over 500 kwok GPU Nodes (or
// ONEPOOL_BENCH_NODESET_NODES) and times it until the status shows that
// many Ready slurmd pods. The Nodes have no slurmd
// behind them (the lab kubelet runs only its dynamic nodes), so this measures
// the controller and the API server, not Slurm registration.
func TestBenchNodeSet(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	size, err := strconv.Atoi(envOr("ONEPOOL_BENCH_NODESET_NODES", strconv.Itoa(benchNodeSetNodes)))
	if err != nil || size < 1 {
		t.Fatalf("ONEPOOL_BENCH_NODESET_NODES: want a count, have %q", os.Getenv("ONEPOOL_BENCH_NODESET_NODES"))
	}
	names := make([]string, size)
	for i := range names {
		names[i] = fmt.Sprintf("nsb-%04d", i)
	}
	cleanupNodeSetBench(t, c, names)
	t.Cleanup(func() { cleanupNodeSetBench(t, c, names) })
	if err := lab.ServeNodeSets(ctx, c, benchNodeSetNS); err != nil {
		t.Fatal(err)
	}
	err = parallelDo(16, names, func(n string) error {
		node := lab.KwokNode(n)
		delete(node.Labels, lab.LabNodeLabel) // not the lab's: `lab up` would remove it
		node.Labels[benchNodeSetLabel] = "true"
		if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second+time.Duration(size)*50*time.Millisecond, fmt.Sprintf("%d kwok Nodes Ready", size), func() (bool, string) {
		var list corev1.NodeList
		if err := c.List(ctx, &list, client.MatchingLabels{benchNodeSetLabel: "true"}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == size, fmt.Sprintf("%d Ready", ready)
	})

	metricsURL := l.ControllerManagerMetricsURL()
	before := scrapeHistogram(t, l, metricsURL, reconcileMetric, `controller="onepool-nodeset"`)
	ns := &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: benchNodeSetNS},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{benchNodeSetLabel: "true"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/node-agent:bench", Command: []string{"/usr/local/bin/onepool-node-agent", "run"},
			}}}},
			Slurm: v1alpha1.SlurmNodeSpec{Features: []string{"bench"}},
		},
	}
	start := time.Now()
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	deadline := start.Add(5 * time.Minute)
	for {
		var got v1alpha1.NodeSet
		if err := c.Get(ctx, client.ObjectKeyFromObject(ns), &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ReadyPods == int32(size) && got.Status.DesiredNodes == int32(size) {
			took = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged after 5 min: status %+v", got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let the last reconciles land in the histogram
	after := scrapeHistogram(t, l, metricsURL, reconcileMetric, `controller="onepool-nodeset"`)
	p99, n := quantile(before, after, 0.99)
	if n == 0 {
		t.Fatalf("no onepool-nodeset reconcile in %s's %s", metricsURL, reconcileMetric)
	}
	t.Logf("converged in %s over %d reconciles", took, n)
	rep := func(name string, v float64, prec int, unit string) {
		fmt.Printf("BENCH %s %.*f %s slurm=%s members=%d\n", name, prec, v, unit, benchRelease(), size)
	}
	rep("nodeset_converge_seconds", took.Seconds(), 1, "s")
	rep("nodeset_reconcile_p99_ms", p99*1000, 0, "ms")
	rep("nodeset_reconciles", float64(n), 0, "count")
}

// scrapeHistogram reads one histogram's cumulative buckets (le → count)
// from a component's /metrics, as the lab's scraper.
func scrapeHistogram(t *testing.T, l *lab.Lab, url, name, match string) map[float64]float64 {
	t.Helper()
	b, err := l.ScrapeMetrics(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	out := map[float64]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		i := strings.Index(line, `le="`)
		if i < 0 {
			continue
		}
		rest := line[i+4:]
		leStr := rest[:strings.IndexByte(rest, '"')]
		le, err := strconv.ParseFloat(leStr, 64)
		if leStr == "+Inf" {
			le, err = math.Inf(1), nil
		}
		f := strings.Fields(line)
		v, err2 := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil && err2 == nil {
			out[le] += v
		}
	}
	return out
}

// quantile is histogram_quantile over the buckets' growth between two
// scrapes, interpolating linearly inside the bucket as Prometheus does.
func quantile(before, after map[float64]float64, q float64) (float64, int) {
	les := make([]float64, 0, len(after))
	for le := range after {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0, 0
	}
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0, 0
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, le := range les {
		count := after[le] - before[le]
		if count >= rank {
			if math.IsInf(le, 1) {
				return prevLE, int(total)
			}
			return prevLE + (le-prevLE)*(rank-prevCount)/math.Max(count-prevCount, 1e-9), int(total)
		}
		prevLE, prevCount = le, count
	}
	return prevLE, int(total)
}

// cleanupNodeSetBench deletes the NodeSet (its finalizer takes the pods:
// Slurm never knew these nodes) and the Nodes.
func cleanupNodeSetBench(t *testing.T, c client.Client, names []string) {
	ctx := context.Background()
	ns := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: benchNodeSetNS}}
	_ = c.Delete(ctx, ns)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err == nil {
		t.Logf("bench NodeSet still there after 3 min: %+v", ns.Status)
	}
	_ = parallelDo(16, names, func(n string) error {
		err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s (last: %s)", what, timeout, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
