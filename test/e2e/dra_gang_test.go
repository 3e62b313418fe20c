package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
)

// jobNodeLineRe is one per-node line of `scontrol show job -d`:
// "Nodes=dyn-[0-1] CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:3-4)".
var jobNodeLineRe = regexp.MustCompile(`(?m)^\s*Nodes=(\S+) .*GRES=(\S+)`)

// jobGresIndexesByNode is a multi-node job's GPU indices on each node.
func jobGresIndexesByNode(t *testing.T, e *nodeSetEnv, id string) map[string][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, "scontrol", "show", "job", "-d", id)
	require.NoError(t, err, "scontrol show job -d %s: %s", id, out)
	byNode := map[string][]int{}
	for _, m := range jobNodeLineRe.FindAllStringSubmatch(string(out), -1) {
		idx := parseGresIndexes(t, m[2])
		for _, n := range strings.Fields(expandForTest(t, m[1])) {
			byNode[n] = idx
		}
	}
	return byNode
}

// A gang (PodGroup) of two onepool pods asking 2 GPUs each, on two 8-GPU
// nodes where a Slurm job holds 3 GPUs of the first: Slurm gives the gang
// one job on both nodes, and each pod's claim holds exactly its own node's
// GPUs of that job (its pool, its indices), never the other node's and
// never the Slurm job's; each node's agent prepares exactly those.
func TestGPUClaimsOfAGangComeFromEachPodsNode(t *testing.T) {
	ne := newNodeSetEnv(t, "dra-gang")
	ne.env = []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}
	nodes := ne.l.DynNodeNames()[:2]
	ne.start(nodes, 1)
	devs := map[string]map[string]draDevice{}
	for _, n := range nodes {
		devs[n] = map[string]draDevice{}
		for _, d := range nodeSlice(t, ne.c, n, 8) {
			devs[n][d.name] = d
		}
	}
	held := ne.sbatchGres(nodes[0], 3)
	heldIdx := jobGresIndexes(t, ne, held)
	t.Cleanup(func() { ne.scancel(held) })

	e := newGPUClaimsEnv(t)
	cfg, err := e.l.RESTConfig()
	require.NoError(t, err)
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "duo", "namespace": e.ns},
		"spec":     map[string]any{"minMember": int64(2)},
	}}
	_, err = dynamic.NewForConfigOrDie(cfg).Resource(scheduler.PodGroupGVR).Namespace(e.ns).Create(context.Background(), pg, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range 2 {
		p := e.pod(fmt.Sprintf("duo-%d", i), 2, map[string]string{keys.AnnotationJobPartition: dynPartition})
		p.Labels = map[string]string{keys.LabelPodGroup: "duo"}
		e.create(p)
	}
	bound := map[string]string{} // pod → node
	for i := range 2 {
		name := fmt.Sprintf("duo-%d", i)
		bound[name] = e.waitBound(name, 60*time.Second)
	}
	require.ElementsMatch(t, nodes, []string{bound["duo-0"], bound["duo-1"]}, "one pod on each node")

	id := e.withJobID("duo-0").Annotations[keys.AnnotationJobID]
	byNode := jobGresIndexesByNode(t, ne, id)
	plugins := map[string]drapb.DRAPluginClient{}
	cdiDirs := map[string]string{}
	for _, n := range nodes {
		plugins[n], cdiDirs[n] = agentDRA(t, ne.l, n)
	}
	for pod, node := range bound {
		p, err := e.get(pod)
		require.NoError(t, err)
		assert.Equal(t, id, p.Annotations[keys.AnnotationJobID], "the gang is one Slurm job")
		claim, err := e.kc.ResourceV1().ResourceClaims(e.ns).Get(context.Background(), podClaimName(p), metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, claim.Status.Allocation, "claim of %s", pod)
		var got []int
		var wantNodes []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			assert.Equal(t, node, r.Pool, "pod %s on %s got a device of pool %s", pod, node, r.Pool)
			d, ok := devs[node][r.Device]
			require.True(t, ok, "pod %s: device %s is not published by %s", pod, r.Device, node)
			got = append(got, d.gresIndex)
			wantNodes = append(wantNodes, fmt.Sprintf("/var/lib/fakegpu/nvidia%d", d.minor))
		}
		assert.Equal(t, byNode[node], got, "pod %s: its claim holds the job's GRES indices on %s", pod, node)
		if node == nodes[0] {
			for _, i := range got {
				assert.NotContains(t, heldIdx, i, "GRES index %d on %s given to the gang and to Slurm job %s", i, node, held)
			}
		}
		res := prepare(t, plugins[node], claim)
		require.Empty(t, res.GetError(), "prepare the claim of %s on %s", pod, node)
		t.Cleanup(func() { unprepare(t, plugins[node], claim) })
		spec := cdiNodes(t, filepath.Join(cdiDirs[node], "onepool.dev-gpu_"+string(claim.UID)+".json"))
		assert.True(t, slices.Equal(spec, wantNodes), "pod %s: CDI device nodes %v, want %v", pod, spec, wantNodes)
	}
	assert.NotEqual(t, byNode[nodes[0]], byNode[nodes[1]], "the nodes' indices differ (the Slurm job holds some of the first's): the test tells them apart")
}

// A pod whose GPUs must come through a claim, in a partition whose node
// publishes no devices (its agent's DRA driver off: as a stale or missing
// ResourceSlice would): Slurm is told to leave that node out, so no job of
// the pod holds its GPUs there (issue 36: before, the job ran and held
// them while the pod waited forever), the pod is never bound to guessed
// devices, and it says why.
func TestGPUClaimOnANodeWithoutDevicesIsNeverBound(t *testing.T) {
	ne := newNodeSetEnv(t, "dra-none") // no ONEPOOL_DRA: no ResourceSlice
	node := ne.l.DynNodeNames()[0]
	e := newGPUClaimsEnv(t)
	// An earlier agent's slice outlives it here: the lab's dynamic nodes
	// have no kubelet to wipe it when the driver goes, as a real one does.
	require.NoError(t, e.kc.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + keys.GPUDriverName}))
	ne.start([]string{node}, 1)
	e.create(e.pod("orphan-gpus", 2, map[string]string{keys.AnnotationJobPartition: dynPartition}))
	// Either no Slurm node fits (every Node publishes none), or the job
	// leaves this node out and Slurm refuses it (the partition's other
	// nodes run no slurmd): which one depends on what earlier tests left.
	eventually(t, 30*time.Second, "the pod says why it waits", func() (bool, string) {
		p, err := e.get("orphan-gpus")
		if err != nil {
			return false, err.Error()
		}
		msg := scheduledMessage(p)
		return strings.Contains(msg, "publish no GPU devices of "+keys.GPUDriverName) ||
			strings.Contains(msg, "its node constraints leave out ("), msg
	})
	e.holdsPod(5*time.Second, "orphan-gpus", func(p *corev1.Pod) (bool, string) {
		for _, j := range e.activeJobs("orphan-gpus") {
			if j.State.Base() == "RUNNING" && strings.Contains(expandForTest(t, j.Nodes), node) {
				return false, fmt.Sprintf("job %d runs on %s", j.ID, node)
			}
		}
		return p.Spec.NodeName == "", "bound to " + p.Spec.NodeName
	})
	if js := e.jobs("orphan-gpus"); len(js) > 0 {
		if exc := expandForTest(t, scontrolJob(t, e.l, js[len(js)-1].ID)["ExcNodeList"]); !strings.Contains(exc, node) {
			t.Errorf("job %d does not leave out %s: ExcNodeList=%s", js[len(js)-1].ID, node, exc)
		}
	}
}
