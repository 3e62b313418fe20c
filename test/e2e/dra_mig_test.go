package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// A slurmd pod of a NodeSet on a node with a partitioned GPU (the fake MIG
// inventory: 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, and a whole GPU)
// registers the MIG devices as typed GRES and publishes them as DRA
// devices. A Slurm job asking --gres=gpu:1g.10gb:1 and a onepool pod asking
// nvidia.com/mig-1g.10gb: 1 share the node, never the same MIG device: the
// pod's job asks gres/gpu:1g.10gb:1, its claim holds the MIG device of its
// job's GRES index, the CDI spec names that device's GPU and its two
// capability files; a second such pod waits in Slurm's queue. On an API
// server serving partitionable devices (1.36) the partitioned GPU is a
// counter set its MIG devices consume; on 1.35 they are plain devices.
func TestMIGPodAndSlurmJobShareANode(t *testing.T) {
	dir, _ := fakeMIGNode(t, lab.Shared(t)) // first: its files go last
	wipeSlicesAfter(t, lab.Shared(t), lab.Shared(t).DynNodeNames()[0])
	ne := newNodeSetEnv(t, "mig")
	ne.env = []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}
	ne.args = []string{"--gpu-inventory", dir + "/inv.json", "--expected-gpus", "2"}
	ne.gres = "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:" + labGresType + ":1"
	node := ne.l.DynNodeNames()[0]
	ne.start([]string{node}, 1)
	devs := nodeSlice(t, ne.c, node, 5)
	byName := map[string]draDevice{}
	for _, d := range devs {
		byName[d.name] = d
	}
	ctx := context.Background()

	// The Slurm user's job first.
	out, err := ne.l.Slurm(ctx, "sbatch", "-p", dynPartition, "-w", node, "--gres=gpu:1g.10gb:1", "-J", "e2e-"+ne.name, "-o", "/dev/null", "--wrap", "sleep 600")
	m := jobIDRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("sbatch: %v %s", err, out)
	}
	eventually(t, time.Minute, "Slurm job "+m[1]+" running", func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out, err := ne.l.Slurm(ctx, "squeue", "-h", "-j", m[1], "-o", "%T")
		return err == nil && strings.TrimSpace(string(out)) == "RUNNING", string(out)
	})
	jobIdx := jobGresIndexes(t, ne, m[1])
	if len(jobIdx) != 1 || devs[jobIdx[0]].gresType != "1g.10gb" {
		t.Fatalf("Slurm job %s: IDX %v, want one 1g.10gb device of %+v", m[1], jobIdx, devs)
	}

	e := newGPUClaimsEnv(t)
	checkMIGSliceForm(t, ne.c, e.kc, node, filepath.Join(ne.l.RootFS(), dir))
	plugin, cdiDir := agentDRA(t, ne.l, node)
	migPod := func(name string) *corev1.Pod {
		p := e.pod(name, 0, map[string]string{keys.AnnotationJobPartition: dynPartition})
		p.Spec.Containers[0].Resources.Limits["nvidia.com/mig-1g.10gb"] = resource.MustParse("1")
		return p
	}
	pc := e.create(migPod("mig-a"))
	if pc.Annotations[keys.AnnotationGPUType] != "1g.10gb" || pc.Annotations[keys.AnnotationGPUs] != "1" || len(pc.Spec.ResourceClaims) != 1 {
		t.Fatalf("mig-a as admitted: annotations %v, claims %+v", pc.Annotations, pc.Spec.ResourceClaims)
	}
	if got := e.waitBound("mig-a", 60*time.Second); got != node {
		t.Fatalf("mig-a bound to %s, want %s", got, node)
	}
	p := e.withJobID("mig-a")
	id := p.Annotations[keys.AnnotationJobID]
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		t.Fatalf("mig-a's job id %q: %v", id, err)
	}
	if j := scontrolJob(t, ne.l, uint32(n)); !strings.Contains(j["TresPerNode"], "gpu:1g.10gb:1") {
		t.Errorf("mig-a's job %s asks TresPerNode=%s, want gres/gpu:1g.10gb:1", id, j["TresPerNode"])
	}
	podIdx := jobGresIndexes(t, ne, id)
	claim, err := e.kc.ResourceV1().ResourceClaims(e.ns).Get(ctx, *p.Spec.ResourceClaims[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("mig-a's claim: %v %+v", err, claim)
	}
	got := byName[claim.Status.Allocation.Devices.Results[0].Device]
	if got.gresType != "1g.10gb" || len(podIdx) != 1 || got.gresIndex != podIdx[0] || got.gresIndex == jobIdx[0] {
		t.Fatalf("mig-a's claim holds %+v; its job %s has IDX %v, the Slurm job %s IDX %v", got, id, podIdx, m[1], jobIdx)
	}
	res := prepare(t, plugin, claim)
	if res.GetError() != "" {
		t.Fatalf("prepare mig-a's claim: %s", res.GetError())
	}
	t.Cleanup(func() { unprepare(t, plugin, claim) })
	nodes := cdiNodes(t, filepath.Join(cdiDir, "onepool.dev-gpu_"+string(claim.UID)+".json"))
	// Device names are gpu-<minor>-mig-<gi>-<ci>; the fake MIG node's caps are FakeMIGCap0+2·gi and the next.
	var gi int
	if _, err := fmt.Sscanf(got.name, "gpu-0-mig-%d-0", &gi); err != nil {
		t.Fatalf("device %s: %v", got.name, err)
	}
	want := []string{"/var/lib/fakegpu/nvidia0", fmt.Sprintf("%s/nvidia-caps/nvidia-cap%d", dir, lab.FakeMIGCap0+2*gi), fmt.Sprintf("%s/nvidia-caps/nvidia-cap%d", dir, lab.FakeMIGCap0+2*gi+1)}
	if !slices.Equal(nodes, want) {
		t.Errorf("mig-a's CDI device nodes %v, want %v", nodes, want)
	}

	// Both 1g.10gb devices are taken: the next pod waits in Slurm's queue.
	e.create(migPod("mig-b"))
	e.holdsPod(10*time.Second, "mig-b", func(p *corev1.Pod) (bool, string) {
		return p.Spec.NodeName == "", "bound to " + p.Spec.NodeName
	})
	t.Logf("Slurm job %s on %s, pod mig-a on %s (%s)", m[1], devs[jobIdx[0]].name, got.name, ne.l.Release().Name)
}
