package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/test/lab"
)

// lwsRounds is how many times the LeaderWorkerSet group is made.
const lwsRounds = 5

// TestBenchLeaderWorkerSet times a LeaderWorkerSet group across every
// lab node (a leader and workers of 8 GPUs each: one Slurm job of all
// nodes) on an idle pool, from the LeaderWorkerSet's creation until every
// pod of the group is bound and Ready; lwsRounds times, each after the
// last group is gone and Slurm shows its GPUs free. LeaderWorkerSet's real
// controller makes the pods.
func TestBenchLeaderWorkerSet(t *testing.T) {
	requireBench(t)
	l := lab.Shared(t)
	ctx := context.Background()
	kc, sc := benchClients(t, l)
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	lws := dynamic.NewForConfigOrDie(cfg).Resource(scheduler.LeaderWorkerSetGVR).Namespace(schedNS)
	cleanupSchedBench(t, kc, sc)
	size := len(l.NodeNames())
	// Gone with its StatefulSets: a LeaderWorkerSet made again under the
	// same name while the garbage collector still deletes the last one's
	// StatefulSets takes them over, and they are deleted under it (its
	// pods made and deleted for up to a minute, seen here).
	fg := metav1.DeletePropagationForeground
	gone := func() {
		_ = lws.Delete(context.Background(), "bench-lws", metav1.DeleteOptions{PropagationPolicy: &fg})
		waitFor(t, 2*time.Minute, "the LeaderWorkerSet, its StatefulSets and pods gone and its GPUs free", func() bool {
			_, err := lws.Get(ctx, "bench-lws", metav1.GetOptions{})
			sts, serr := kc.AppsV1().StatefulSets(schedNS).List(ctx, metav1.ListOptions{})
			pods, perr := kc.CoreV1().Pods(schedNS).List(ctx, metav1.ListOptions{LabelSelector: keys.LabelLWSName + "=bench-lws"})
			return apierrors.IsNotFound(err) && serr == nil && len(sts.Items) == 0 && perr == nil && len(pods.Items) == 0 &&
				gpusInUse(t, sc, l.NodeNames()) == 0
		})
	}
	t.Cleanup(func() { gone(); cleanupSchedBench(t, kc, sc) })
	gone()
	var took []time.Duration
	for range lwsRounds {
		start := time.Now()
		if _, err := lws.Create(ctx, benchLWS(int64(size)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Minute, fmt.Sprintf("the group's %d pods bound and Ready", size), func() bool {
			pods, err := kc.CoreV1().Pods(schedNS).List(ctx, metav1.ListOptions{LabelSelector: keys.LabelLWSName + "=bench-lws"})
			if err != nil {
				return false
			}
			n := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && podReady(&p) {
					n++
				}
			}
			return n == size
		})
		took = append(took, time.Since(start))
		gone()
	}
	// The median (nearest rank) and the slowest of the rounds, in seconds.
	fmt.Printf("BENCH lws_group_to_all_running_s %.1f s slurm=%s n=%d p50\n", percentileMS(took, 0.50)/1000, benchRelease(), len(took))
	fmt.Printf("BENCH lws_group_to_all_running_max_s %.1f s slurm=%s n=%d\n", percentileMS(took, 1)/1000, benchRelease(), len(took))
}

// benchLWS is LeaderWorkerSet bench-lws: one group of size pods of
// lab.GPUsPerNode GPUs each.
func benchLWS(size int64) *unstructured.Unstructured {
	spec := corev1.PodSpec{
		SchedulerName: keys.SchedulerName,
		Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(lab.GPUsPerNode, resource.DecimalSI)},
		}}},
	}
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		panic(err) // a PodSpec always converts
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": "bench-lws", "namespace": schedNS},
		"spec": map[string]any{"replicas": int64(1), "leaderWorkerTemplate": map[string]any{
			"size": size, "workerTemplate": map[string]any{"spec": tmpl},
		}},
	}}
}
