package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

const (
	migBenchPods = 20
	migBenchNS   = "onepool-bench-mig"
)

// migBench1g are the fake MIG node's two 1g.10gb devices (GPU instances 9
// and 10 of GPU 0, lab.MIGInventory) as the agent's DRA driver names them.
var migBench1g = []string{"gpu-0-mig-9-0", "gpu-0-mig-10-0"}

// TestBenchMIG times a pod asking a MIG profile (nvidia.com/mig-1g.10gb: 1,
// the webhook's claim, Slurm's gres/gpu:1g.10gb:1, the claim written from
// the job's GRES index) from create to bound, one at a time, on the lab's
// fake MIG node (a dynamic node beside TestBenchGPU's, real slurmd, the
// agent's DRA driver). Each pod goes, and its job ends, before the next.
func TestBenchMIG(t *testing.T) {
	requireBench(t)
	l, c, kc, sc := gpuBenchClients(t)
	ctx := context.Background()
	dyn := l.DynNodeNames()
	if len(dyn) <= gpuBenchNodes {
		t.Fatalf("the lab has %d dynamic nodes; the MIG bench takes the one after TestBenchGPU's %d", len(dyn), gpuBenchNodes)
	}
	node := dyn[gpuBenchNodes]
	dir := fmt.Sprintf("/tmp/bench-mig-%d", time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(filepath.Join(l.RootFS(), dir)) }) // first: runs after the NodeSet is gone
	if _, err := l.WriteFakeMIGNode(dir, lab.FakeMIGMixed); err != nil {
		t.Fatal(err)
	}
	startGPUNodeSet(t, c, gpuBenchSet{name: "mig", gpus: 2, devices: 5, args: []string{"--gpu-inventory", dir + "/inv.json"}}, []string{node})

	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: migBenchNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cleanupBenchPods(t, kc, sc, migBenchNS)
	t.Cleanup(func() { cleanupBenchPods(t, kc, sc, migBenchNS) })

	var took []time.Duration
	for i := range migBenchPods {
		name := fmt.Sprintf("mig-%02d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: migBenchNS, Annotations: map[string]string{keys.AnnotationJobPartition: lab.DynPartition}},
			Spec: corev1.PodSpec{SchedulerName: keys.SchedulerName, Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}}}}},
		}
		bound, d := createUntilBound(t, kc, pod)
		took = append(took, d)
		if bound.Spec.NodeName != node || len(bound.Spec.ResourceClaims) != 1 || bound.Spec.ResourceClaims[0].ResourceClaimName == nil {
			t.Fatalf("%s bound to %s with claims %+v; want %s and one claim", name, bound.Spec.NodeName, bound.Spec.ResourceClaims, node)
		}
		claim, err := kc.ResourceV1().ResourceClaims(migBenchNS).Get(ctx, *bound.Spec.ResourceClaims[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || !slices.Contains(migBench1g, a.Devices.Results[0].Device) {
			t.Fatalf("%s's claim holds %+v; want one of the 1g.10gb devices %v", name, a, migBench1g)
		}
		cleanupBenchPods(t, kc, sc, migBenchNS)
	}
	reportPercentile("mig_pod_to_bound_p50_ms", took, 0.50)
	reportPercentile("mig_pod_to_bound_p99_ms", took, 0.99)
}
