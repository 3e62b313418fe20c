package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

const (
	gpuBenchNodes  = 4                          // dynamic nodes with the agent's DRA driver: 32 GPUs
	gpuBenchPods   = 30                         // one-GPU pods per kind, kept until the kind is done
	gpuBenchNS     = "onepool-bench-gpu"        // through the webhook: claims
	gpuBenchNSNone = "onepool-bench-gpu-plugin" // labelled out: no claims
	gpuBenchLabel  = "bench.onepool.dev/gpu"
	gpuBenchNodeNS = "onepool-bench-gpu-nodes"
)

// TestBenchGPU times what GPU claims add to placement: one-GPU pods on the
// lab's dynamic nodes (real slurmd, the agent's DRA driver) created one at
// a time until bound, with claims (the webhook, the claim written from
// Slurm's GRES indices at PreBind) and without; and the agent's
// NodePrepareResources for each claim, called as the kubelet would.
func TestBenchGPU(t *testing.T) {
	requireBench(t)
	l, c, kc, sc := gpuBenchClients(t)
	ctx := context.Background()
	nodes := l.DynNodeNames()[:gpuBenchNodes]
	startGPUNodeSet(t, c, gpuBenchSet{name: "gpu", gpus: 8, devices: 8}, nodes)

	var with, without, prep []time.Duration
	for _, ns := range []string{gpuBenchNS, gpuBenchNSNone} {
		labels := map[string]string{}
		if ns == gpuBenchNSNone {
			labels[lab.LabelGPUClaims] = lab.GPUClaimsDisabled
		}
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		cleanupBenchPods(t, kc, sc, ns)
		t.Cleanup(func() { cleanupBenchPods(t, kc, sc, ns) })
	}
	plugins := map[string]drapb.DRAPluginClient{}
	for _, n := range nodes {
		conn, err := grpc.NewClient("unix://"+filepath.Join(l.RootFS(), "run", "onepool", n, "dra", "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		plugins[n] = drapb.NewDRAPluginClient(conn)
	}

	for _, ns := range []string{gpuBenchNS, gpuBenchNSNone} {
		for i := range gpuBenchPods {
			name := fmt.Sprintf("p-%02d", i)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{keys.AnnotationJobPartition: lab.DynPartition}},
				Spec: corev1.PodSpec{SchedulerName: keys.SchedulerName, Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
			}
			bound, took := createUntilBound(t, kc, pod)
			if ns == gpuBenchNSNone {
				without = append(without, took)
				continue
			}
			with = append(with, took)
			if len(bound.Spec.ResourceClaims) != 1 || bound.Spec.ResourceClaims[0].ResourceClaimName == nil {
				t.Fatalf("%s has no GPU claim: %+v", name, bound.Spec.ResourceClaims)
			}
			claim, err := kc.ResourceV1().ResourceClaims(ns).Get(ctx, *bound.Spec.ResourceClaims[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			start := time.Now()
			resp, err := plugins[bound.Spec.NodeName].NodePrepareResources(pctx, req)
			prep = append(prep, time.Since(start))
			cancel()
			if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
				t.Fatalf("prepare %s: %v %v", claim.Name, err, resp)
			}
			// No kubelet runs there to unprepare when the pod goes.
			uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = plugins[bound.Spec.NodeName].NodeUnprepareResources(uctx, &drapb.NodeUnprepareResourcesRequest{Claims: req.Claims})
			cancel()
			if err != nil {
				t.Fatalf("unprepare %s: %v", claim.Name, err)
			}
		}
		// Both kinds get the same 32 free GPUs.
		cleanupBenchPods(t, kc, sc, ns)
	}
	report("claim_allocation_overhead_p50_ms", percentileMS(with, 0.50)-percentileMS(without, 0.50), "ms")
	report("claim_allocation_overhead_p99_ms", percentileMS(with, 0.99)-percentileMS(without, 0.99), "ms")
	reportPercentile("pod_to_bound_with_claim_p50_ms", with, 0.50)
	reportPercentile("pod_to_bound_without_claim_p50_ms", without, 0.50)
	reportPercentile("prepare_resources_p99_ms", prep, 0.99)
}

// gpuBenchClients are the lab's clients the GPU benches use.
func gpuBenchClients(t *testing.T) (*lab.Lab, client.Client, kubernetes.Interface, *slurmrest.Client) {
	t.Helper()
	l := lab.Shared(t)
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: l.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, kubernetes.NewForConfigOrDie(cfg), sc
}

// createUntilBound creates pod and waits (60 s at most) until it is bound:
// the pod as bound, and how long that took from the create.
func createUntilBound(t *testing.T, kc kubernetes.Interface, pod *corev1.Pod) (*corev1.Pod, time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := kc.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not bound in 60 s", pod.Namespace, pod.Name)
		}
		if p, err := kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
			return p, time.Since(start)
		}
	}
}

// gpuBenchSet is a NodeSet of the agent with its DRA driver: gpus the GPUs
// it expects, devices the DRA devices each node publishes, args the agent's
// run flags beyond the lab's.
type gpuBenchSet struct {
	name          string
	gpus, devices int
	args          []string
}

// startGPUNodeSet runs the agent with its DRA driver on nodes and waits for
// their ResourceSlices.
func startGPUNodeSet(t *testing.T, c client.Client, set gpuBenchSet, nodes []string) {
	t.Helper()
	ctx := context.Background()
	if err := lab.ServeNodeSets(ctx, c, gpuBenchNodeNS); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, gpuBenchLabel, set.name)))); err != nil {
			t.Fatal(err)
		}
	}
	mu := intstr.FromInt32(1)
	ns := &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: set.name, Namespace: gpuBenchNodeNS},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{gpuBenchLabel: set.name},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "slurmd", Image: "onepool/node-agent:lab", Command: []string{lab.AgentPath, "run"}, Args: set.args,
				Env: []corev1.EnvVar{{Name: "ONEPOOL_SLURM_CPUS", Value: "16"}, {Name: "ONEPOOL_SLURM_REAL_MEMORY_MB", Value: "64000"},
					{Name: "ONEPOOL_EXPECTED_GPUS", Value: strconv.Itoa(set.gpus)}, {Name: "ONEPOOL_DRA", Value: "true"}},
			}}}},
			Slurm:          v1alpha1.SlurmNodeSpec{Features: []string{lab.DynFeature}, Partitions: []string{lab.DynPartition}},
			UpdateStrategy: v1alpha1.UpdateStrategy{Type: v1alpha1.RollingUpdate, RollingUpdate: &v1alpha1.RollingUpdateStrategy{MaxUnavailable: &mu}},
		},
	}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), ns)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
				break
			}
		}
		for _, n := range nodes {
			_ = c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, client.RawPatch("application/merge-patch+json",
				[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, gpuBenchLabel))))
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		var got v1alpha1.NodeSet
		if err := c.Get(ctx, client.ObjectKeyFromObject(ns), &got); err == nil && got.Status.Slurm.Idle == int32(len(nodes)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s NodeSet's %d nodes not idle in Slurm within 3 min", set.name, len(nodes))
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		n, err := countSlices(c, nodes, set.devices)
		if err == nil && n >= len(nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes publish a ResourceSlice of %d devices after 2 min (%v)", n, len(nodes), set.devices, err)
		}
	}
}

// countSlices counts the nodes of nodes that publish devices GPUs (the
// lab's static nodes publish theirs too: they do not count).
func countSlices(c client.Client, nodes []string, devices int) (int, error) {
	var list resourceapi.ResourceSliceList
	if err := c.List(context.Background(), &list); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.Driver == keys.GPUDriverName && len(s.Spec.Devices) == devices && s.Spec.NodeName != nil && slices.Contains(nodes, *s.Spec.NodeName) {
			n++
		}
	}
	return n, nil
}
