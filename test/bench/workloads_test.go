package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

const (
	workloadReplicas  = 32
	workloadScaleDown = 20
)

// TestBenchWorkloads times an inference Deployment of one-GPU replicas
// (kube-controller-manager makes the pods, onepool places them through
// Slurm) on an idle pool of at least 32 GPUs: scale 0 to 32 until every
// replica is Ready; scale down one replica at a time until Slurm shows its
// GPU free; and a high-QOS training job on every node: from its end until
// the replicas it preempted (recreated by the Deployment) run again.
func TestBenchWorkloads(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	if gpus := len(l.NodeNames()) * lab.GPUsPerNode; gpus < workloadReplicas {
		t.Fatalf("the benchmark needs %d GPUs on the lab's nodes (have %d)", workloadReplicas, gpus)
	}
	ctx := context.Background()
	kc, sc := benchClients(t, l)
	cleanupSchedBench(t, kc, sc)
	deploys := kc.AppsV1().Deployments(schedNS)
	t.Cleanup(func() {
		_ = deploys.Delete(context.Background(), "bench-infer", metav1.DeleteOptions{})
		cleanupSchedBench(t, kc, sc)
	})
	_ = deploys.Delete(ctx, "bench-infer", metav1.DeleteOptions{})
	if _, err := deploys.Create(ctx, benchDeployment(0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) {
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
		if _, err := deploys.Patch(ctx, "bench-infer", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatal(err)
		}
	}
	ready := func() int {
		pods, err := kc.CoreV1().Pods(schedNS).List(ctx, metav1.ListOptions{LabelSelector: "app=bench-infer"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && podReady(&p) {
				n++
			}
		}
		return n
	}
	waitFor := func(what string, timeout time.Duration, cond func() bool) time.Time {
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Now()
	}
	inUse := func() int { return gpusInUse(t, sc, l.NodeNames()) }

	// Scale 0 to 32 on an idle pool.
	base := inUse()
	start := time.Now()
	scale(workloadReplicas)
	at := waitFor("32 replicas Ready", 5*time.Minute, func() bool { return ready() == workloadReplicas })
	reportPrec("deployment_scale_0_to_32_ready_s", at.Sub(start).Seconds(), 1, "s")

	// One replica fewer at a time, until Slurm shows its GPU free.
	var down []time.Duration
	for i := 1; i <= workloadScaleDown; i++ {
		want := base + workloadReplicas - i
		start := time.Now()
		scale(int32(workloadReplicas - i))
		at := waitFor(fmt.Sprintf("%d GPUs in use", want), time.Minute, func() bool { return inUse() == want })
		down = append(down, at.Sub(start))
	}
	reportPercentile("scale_down_to_gpus_free_p50_ms", down, 0.50)
	reportPercentile("scale_down_to_gpus_free_p99_ms", down, 0.99)

	// Training on every node preempts the replicas; from its end until the
	// recreated replicas run again.
	left := workloadReplicas - workloadScaleDown
	out, err := l.Slurm(ctx, "sbatch", "--parsable", "-J", "bench-train", "-p", lab.Partition, "--qos=high",
		fmt.Sprintf("--nodes=%d", len(l.NodeNames())), fmt.Sprintf("--gres=gpu:%d", lab.GPUsPerNode), "-o", "/dev/null", "--wrap", "sleep 600")
	if err != nil {
		t.Fatalf("sbatch the training job: %v %s", err, out)
	}
	train, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
	if err != nil {
		t.Fatalf("sbatch: %q", out)
	}
	t.Cleanup(func() { _ = sc.CancelJob(context.Background(), uint32(train)) })
	waitJobRunning(t, sc, uint32(train), 3*time.Minute)
	waitFor("no replica Ready while the training runs", time.Minute, func() bool { return ready() == 0 })
	start = time.Now()
	if err := sc.CancelJob(ctx, uint32(train)); err != nil {
		t.Fatal(err)
	}
	at = waitFor(fmt.Sprintf("%d replicas Ready again", left), 3*time.Minute, func() bool { return ready() == left })
	reportPrec("preempted_replica_rescheduled_s", at.Sub(start).Seconds(), 1, "s")
}

func benchDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "bench-infer"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-infer", Namespace: schedNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName: keys.SchedulerName,
					Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
						Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(1, resource.DecimalSI)},
					}}},
				},
			},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gpusInUse sums the GPUs Slurm has allocated on nodes.
func gpusInUse(t *testing.T, sc *slurmrest.Client, nodes []string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := sc.ListNodes(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range list.Nodes {
		if !slices.Contains(nodes, n.Name) {
			continue
		}
		total += lab.GresUsedCount(n.GresUsed)
	}
	return total
}
