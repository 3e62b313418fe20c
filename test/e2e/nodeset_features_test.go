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

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
)

// A NodeSet with FeatureLabels registers each node with its Node's label
// values as Slurm features, so a Slurm user asks for a GPU product with
// --constraint, as a pod does with a nodeSelector. When the label changes,
// Slurm's features follow: no drain, no new slurmd pod, running jobs stay.
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

	// The product label changes while the job runs: Slurm gets the new
	// feature, and nothing else changes: no drain, no new pod, the job runs.
	setProduct("NVIDIA-H200")
	eventually(t, 60*time.Second, node+" lists the new product only", func() (bool, string) {
		f := features()
		return f == dynFeature+",NVIDIA-H200", f
	})
	kv := e.slurmNode(node)
	if strings.Contains(kv["State"], "DRAIN") {
		t.Errorf("%s was drained for a label change: %s %s", node, kv["State"], kv["Reason"])
	}
	if p, ok := e.pods()[node]; !ok || p.UID != before.UID {
		t.Errorf("the slurmd pod on %s was replaced for a label change", node)
	}
	if out, _ := e.l.Slurm(context.Background(), "squeue", "-h", "-j", job, "-o", "%T"); strings.TrimSpace(string(out)) != "RUNNING" {
		t.Errorf("job %s: %q, want RUNNING", job, out)
	}
	if ok, seen := nodeSetEvent(t, e, keys.EventFeaturesSet, node+"'s features to "+dynFeature+",NVIDIA-H200"); !ok {
		t.Errorf("no %s event on the NodeSet; seen: %s", keys.EventFeaturesSet, seen)
	}

	// The new feature is what Slurm places by now.
	e.scancel(job)
	ctx, cancel = context.WithTimeout(context.Background(), 40*time.Second)
	out, err = e.l.Slurm(ctx, "sbatch", "-p", dynPartition, "--constraint=NVIDIA-H200", "--gres=gpu:1",
		"-J", "e2e-"+e.name, "-o", "/dev/null", "--wrap", "sleep 600")
	cancel()
	if m = jobIDRe.FindStringSubmatch(string(out)); err != nil || m == nil {
		t.Fatalf("sbatch --constraint=NVIDIA-H200: %v %s", err, out)
	}
	eventually(t, 30*time.Second, "job "+m[1]+" with the new product runs on "+node, func() (bool, string) {
		out, _ := e.l.Slurm(context.Background(), "squeue", "-h", "-j", m[1], "-o", "%T %N")
		s := strings.TrimSpace(string(out))
		return s == "RUNNING "+node, s
	})
}

// nodeSetEvent says whether the NodeSet got an event with reason and text
// (waiting up to 15 s for it).
func nodeSetEvent(t *testing.T, e *nodeSetEnv, reason, text string) (bool, string) {
	t.Helper()
	kc, err := e.l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	return soon(func() (bool, string) { return testenv.HasEvent(kc, nodeSetNS, e.name, reason, text) })
}
