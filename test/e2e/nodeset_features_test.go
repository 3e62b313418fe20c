package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
)

// A NodeSet with FeatureLabels registers each node with its Node's label
// values as Slurm features, so a Slurm user asks for a GPU product with
// --constraint, as a pod does with a nodeSelector. When the label changes,
// the node's slurmd pod is replaced like on a template change: not while
// a job runs there, and the node comes back with the new feature only.
func TestNodeSetFeatureLabelsBecomeSlurmFeatures(t *testing.T) {
	e := newNodeSetEnv(t, "features")
	const productLabel = "e2e.onepool.dev/gpu-product"
	e.featureLabels = []string{productLabel}
	node := e.l.DynNodeNames()[0]
	setProduct := func(v string) {
		t.Helper()
		ctx, cancel := e.ctx()
		defer cancel()
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, productLabel, v))
		if err := e.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("label %s: %v", node, err)
		}
	}
	t.Cleanup(func() {
		_ = e.c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, productLabel))))
	})
	features := func() string { return e.slurmNode(node)["AvailableFeatures"] }

	setProduct("NVIDIA-H100-80GB-HBM3")
	e.start([]string{node}, 1)
	if got := features(); got != dynFeature+",NVIDIA-H100-80GB-HBM3" {
		t.Fatalf("%s registered with features %q, want %q", node, got, dynFeature+",NVIDIA-H100-80GB-HBM3")
	}
	if got := e.pods()[node].Annotations[keys.AnnotationSlurmFeatures]; got != dynFeature+",NVIDIA-H100-80GB-HBM3" {
		t.Errorf("the slurmd pod records features %q", got)
	}

	// A Slurm user asks for the product; the job runs there.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	out, err := e.l.Slurm(ctx, "sbatch", "-p", dynPartition, "--constraint=NVIDIA-H100-80GB-HBM3", "--gres=gpu:1",
		"-J", "e2e-"+e.name, "-o", "/dev/null", "--wrap", "sleep 600")
	cancel()
	m := jobIDRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("sbatch --constraint: %v %s", err, out)
	}
	job := m[1]
	eventually(t, 30*time.Second, "job "+job+" with --constraint runs on "+node, func() (bool, string) {
		out, _ := e.l.Slurm(context.Background(), "squeue", "-h", "-j", job, "-o", "%T %N")
		s := strings.TrimSpace(string(out))
		return s == "RUNNING "+node, s
	})
	before := e.pods()[node]

	// The product label changes while the job runs: the node is drained for
	// the update, its pod stays until the job ends.
	setProduct("NVIDIA-H200")
	eventually(t, 60*time.Second, node+" drained for the NodeSet's update", func() (bool, string) {
		kv := e.slurmNode(node)
		return strings.Contains(kv["State"], "DRAIN") && kv["Reason"] == keys.ReasonNodeSetUpdate, kv["State"] + " " + kv["Reason"]
	})
	time.Sleep(3 * time.Second) // a replacement would be under way by now
	if p, ok := e.pods()[node]; !ok || p.UID != before.UID {
		t.Fatalf("the slurmd pod on %s was replaced while job %s runs", node, job)
	}
	if out, _ := e.l.Slurm(context.Background(), "squeue", "-h", "-j", job, "-o", "%T"); strings.TrimSpace(string(out)) != "RUNNING" {
		t.Fatalf("job %s: %q, want RUNNING", job, out)
	}

	e.scancel(job)
	eventually(t, 120*time.Second, node+" back with the new product only", func() (bool, string) {
		p, ok := e.pods()[node]
		kv := e.slurmNode(node)
		return ok && p.UID != before.UID && features() == dynFeature+",NVIDIA-H200" &&
				strings.HasPrefix(kv["State"], "IDLE") && !strings.Contains(kv["State"], "DRAIN"),
			fmt.Sprintf("pod replaced %v, State=%s AvailableFeatures=%s", ok && p.UID != before.UID, kv["State"], kv["AvailableFeatures"])
	})
}
