package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// scalePlacements is how many pods benchScalePlacement places.
const scalePlacements = 16

// benchScalePlacement places onepool pods one at a time beside the
// foreign queue, each deleted and its job ended before the next: pod →
// bound, and what the scheduler asked slurmrestd per pod (its own
// onepool_slurmrest_* counters; the idle polls of that time included).
// Issue 38's goal: bytes per pod independent of the foreign jobs. Jobs
// are followed by id here, never listed: at 50,000 jobs one listing takes
// slurmrestd minutes.
func benchScalePlacement(t *testing.T, l *lab.Lab, rep func(string, float64, string)) {
	kc, sc := benchClients(t, l)
	ensureSchedNS(t, kc)
	w := watchSchedPods(t, kc)
	ctx := context.Background()
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", lab.SchedulerPort)
	req0, by0 := scrapeSum(t, l, url, "onepool_slurmrest_requests_total"), scrapeSum(t, l, url, "onepool_slurmrest_response_bytes_total")
	var lat []time.Duration
	zero := int64(0)
	for i := range scalePlacements {
		name := fmt.Sprintf("scale-%02d", i)
		start := time.Now()
		createGPUPod(t, kc, name)
		lat = append(lat, w.waitBound(t, name, 2*time.Minute).Sub(start))
		id := recordedJob(t, kc, name)
		if err := kc.CoreV1().Pods(schedNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		w.waitGone(t, name, time.Minute)
		deadline := time.Now().Add(time.Minute)
		for {
			st, err := sc.JobStates(ctx, []uint32{uint32(id)})
			if err == nil && (len(st) == 0 || st[0].State.Finished()) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d of pod %s still live a minute after the pod went: %v %v", id, name, st, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	req, by := scrapeSum(t, l, url, "onepool_slurmrest_requests_total"), scrapeSum(t, l, url, "onepool_slurmrest_response_bytes_total")
	rep("scale_pod_to_bound_p50_ms", percentileMS(lat, 0.50), "ms")
	rep("scale_pod_to_bound_p99_ms", percentileMS(lat, 0.99), "ms")
	rep("scale_scheduler_requests_per_pod", (req-req0)/scalePlacements, "requests")
	rep("scale_scheduler_bytes_per_pod", (by-by0)/scalePlacements, "bytes")
}

// recordedJob waits (30 s at most) for the job id the scheduler records
// on a bound pod: it writes the annotation after the bind.
func recordedJob(t *testing.T, kc kubernetes.Interface, name string) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := kc.CoreV1().Pods(schedNS).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if id, perr := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32); perr == nil {
				return id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s records no job id after 30 s (%v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
