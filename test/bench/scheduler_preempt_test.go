package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

const schedPreemptions = 16

// benchIdleRequests counts the slurmrestd requests onepool's scheduler
// makes in a minute with no onepool pod (its cache's polls only: watching
// owned jobs must not add any).
func benchIdleRequests(t *testing.T) {
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", lab.SchedulerPort)
	before := scrapeSum(t, lab.Shared(t), url, "onepool_slurmrest_requests_total")
	time.Sleep(time.Minute)
	report("scheduler_idle_requests_per_min", scrapeSum(t, lab.Shared(t), url, "onepool_slurmrest_requests_total")-before, "requests")
}

// benchPreemption fills every node with one 8-GPU onepool pod (QOS
// normal), then submits high-QOS jobs one at a time: each makes Slurm
// begin preempting one placeholder. Measured: Slurm's preempt_time (whole
// seconds, so up to 1 s early) until the pod has a deletionTimestamp.
func benchPreemption(t *testing.T, kc kubernetes.Interface, sc *slurmrest.Client, w *schedWatcher, nodes int) {
	ctx := context.Background()
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("full-%03d", i)
		createPod(t, kc, names[i], lab.GPUsPerNode)
	}
	for _, n := range names {
		w.waitBound(t, n, 2*time.Minute)
	}
	var high []uint32
	t.Cleanup(func() {
		for _, id := range high {
			_ = sc.CancelJob(context.Background(), id)
		}
	})
	var lat []time.Duration
	for i := range schedPreemptions {
		id, err := sc.SubmitJob(ctx, slurmrest.JobSubmit{
			Name: fmt.Sprintf("bench-high-%d", i), Script: "#!/bin/sh\nsleep 600\n", Partition: lab.Partition,
			Nodes: "1", Tasks: 1, TresPerNode: fmt.Sprintf("gres/gpu:%d", lab.GPUsPerNode), QOS: lab.QOSHigh,
			WorkDir: "/tmp", Environment: []string{"PATH=/usr/bin:/bin"}, Comment: "onepool bench preemptor",
		})
		if err != nil {
			t.Fatal(err)
		}
		high = append(high, id)
		victim, at := w.waitTerminatingAny(t, names, time.Minute)
		w.mu.Lock()
		recorded := w.jobID[victim]
		w.mu.Unlock()
		jobID, err := strconv.ParseUint(recorded, 10, 32)
		if err != nil {
			t.Fatalf("victim %s records no job id (%q): %v", victim, recorded, err)
		}
		j, err := sc.GetJob(ctx, uint32(jobID))
		if err != nil {
			t.Fatal(err)
		}
		if j.PreemptTime.IsZero() {
			t.Fatalf("pod %s went, but its job %d was not preempted (%v %s)", victim, jobID, j.State, j.Reason)
		}
		lat = append(lat, at.Sub(j.PreemptTime))
		waitJobRunning(t, sc, id, 2*time.Minute)
	}
	reportPercentile("preempt_to_pod_evicting_p50_ms", lat, 0.50)
	reportPercentile("preempt_to_pod_evicting_p99_ms", lat, 0.99)
}

func waitJobRunning(t *testing.T, sc *slurmrest.Client, id uint32, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j, err := sc.GetJob(context.Background(), id)
		if err == nil && j.State.Base() == slurmrest.JobRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not running after %s (%v)", id, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func createPod(t *testing.T, kc kubernetes.Interface, name string, gpus int) {
	p := gpuPod(name, gpus)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kc.CoreV1().Pods(schedNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Errorf("create %s: %v", name, err)
	}
}

// gpuPod is a onepool pod of the scheduler benchmarks asking gpus GPUs.
func gpuPod(name string, gpus int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: schedNS},
		Spec: corev1.PodSpec{
			SchedulerName: keys.SchedulerName,
			Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(gpus), resource.DecimalSI)},
			}}},
		},
	}
}
