package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

const draNS = "onepool-e2e-dra"

// draDevice is one published GPU as a user reads it from the ResourceSlice.
type draDevice struct {
	name      string
	gresIndex int
	minor     int
	uuid      string
	gresType  string
}

// nodeSlice waits for the agent's ResourceSlice of node and returns its
// devices by GRES index.
func nodeSlice(t *testing.T, c client.Client, node string, want int) []draDevice {
	t.Helper()
	var devs []draDevice
	eventually(t, 60*time.Second, "a ResourceSlice of "+keys.GPUDriverName+" for "+node, func() (bool, string) {
		var list resourceapi.ResourceSliceList
		if err := c.List(context.Background(), &list); err != nil {
			return false, err.Error()
		}
		devs = nil
		for _, s := range list.Items {
			if s.Spec.Driver != keys.GPUDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
				continue
			}
			if s.Spec.Pool.Name != node {
				t.Fatalf("slice %s: pool %q, want the node's name %q", s.Name, s.Spec.Pool.Name, node)
			}
			for _, d := range s.Spec.Devices {
				a := d.Attributes
				if a[keys.GPUAttrGresIndex].IntValue == nil || a[keys.GPUAttrMinor].IntValue == nil || a[keys.GPUAttrUUID].StringValue == nil {
					t.Fatalf("slice %s device %s lacks gresIndex/minor/uuid: %+v", s.Name, d.Name, a)
				}
				dev := draDevice{name: d.Name, gresIndex: int(*a[keys.GPUAttrGresIndex].IntValue),
					minor: int(*a[keys.GPUAttrMinor].IntValue), uuid: *a[keys.GPUAttrUUID].StringValue}
				if ty := a[keys.GPUAttrGresType].StringValue; ty != nil {
					dev.gresType = *ty
				}
				devs = append(devs, dev)
			}
		}
		return len(devs) == want, fmt.Sprintf("%d devices", len(devs))
	})
	sort.Slice(devs, func(i, j int) bool { return devs[i].gresIndex < devs[j].gresIndex })
	return devs
}

var idxRe = regexp.MustCompile(`IDX:([0-9,-]+)\)`)

// jobGresIndexes is the job's GPU indices from `scontrol show job -d`.
func jobGresIndexes(t *testing.T, e *nodeSetEnv, id string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, "scontrol", "show", "job", "-d", id)
	if err != nil {
		t.Fatalf("scontrol show job -d %s: %v\n%s", id, err, out)
	}
	return parseGresIndexes(t, string(out))
}

// parseGresIndexes reads the GPU indices from `scontrol show job -d`'s
// output (GRES=gpu:h100:2(IDX:3-4)).
func parseGresIndexes(t *testing.T, out string) []int {
	t.Helper()
	ms := idxRe.FindAllStringSubmatch(out, -1)
	if ms == nil {
		t.Fatalf("no GRES IDX in scontrol show job -d:\n%s", out)
	}
	var idx []int
	for _, m := range ms { // an entry per GPU type
		for _, part := range strings.Split(m[1], ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if isRange {
				b, _ = strconv.Atoi(hi)
			}
			for i := a; i <= b; i++ {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

// handClaim creates a claim for Slurm job job's GPUs devs and writes its
// allocation by hand (what onepool's scheduler does from Slurm's answer,
// recording the job on the claim).
func handClaim(t *testing.T, c client.Client, name, node, job string, devs []draDevice) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: draNS, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: keys.GPUDriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(devs))},
		}}}},
	}
	if job != "" {
		claim.Annotations = map[string]string{keys.AnnotationJobID: job}
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	for _, d := range devs {
		if claim.Status.Allocation == nil {
			claim.Status.Allocation = &resourceapi.AllocationResult{}
		}
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: keys.GPUDriverName, Pool: node, Device: d.name})
	}
	if err := c.Status().Update(ctx, claim); err != nil {
		t.Fatalf("allocate claim %s: %v", name, err)
	}
	return claim
}

func prepare(t *testing.T, plugin drapb.DRAPluginClient, claim *resourceapi.ResourceClaim) *drapb.NodePrepareResourceResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatalf("NodePrepareResources %s: %v", claim.Name, err)
	}
	return resp.Claims[string(claim.UID)]
}

func unprepare(t *testing.T, plugin drapb.DRAPluginClient, claim *resourceapi.ResourceClaim) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("NodeUnprepareResources %s: %v %v", claim.Name, err, resp)
	}
}

// agentDRA is a client of the DRA socket of node's agent (where the lab's
// process kubelet runs it: in the chroot, under its state dir) and the
// directory of its CDI specs. The connection closes after the test's other
// cleanups (registered first, run last).
func agentDRA(t *testing.T, l *lab.Lab, node string) (drapb.DRAPluginClient, string) {
	t.Helper()
	dir := filepath.Join(l.RootFS(), "run", "onepool", node)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "dra", "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return drapb.NewDRAPluginClient(conn), filepath.Join(dir, "cdi")
}

// cdiMounts are the mounts of the agent's CDI spec: container path → host path.
func cdiMounts(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	var spec struct {
		ContainerEdits struct {
			Mounts []struct {
				HostPath      string   `json:"hostPath"`
				ContainerPath string   `json:"containerPath"`
				Options       []string `json:"options"`
			} `json:"mounts"`
		} `json:"containerEdits"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("CDI spec %s: %v", path, err)
	}
	out := map[string]string{}
	for _, m := range spec.ContainerEdits.Mounts {
		if !slices.Contains(m.Options, "ro") {
			t.Errorf("CDI mount %s is not read-only: %v", m.ContainerPath, m.Options)
		}
		out[m.ContainerPath] = m.HostPath
	}
	return out
}

// cdiNodes are the device nodes the agent's CDI spec for claim names.
func cdiNodes(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			ContainerEdits struct {
				DeviceNodes []struct {
					Path string `json:"path"`
				} `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("CDI spec %s: %v", path, err)
	}
	var nodes []string
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	return nodes
}

// The node agent publishes the node's fake GPUs with their Slurm GRES
// indices, and prepares exactly the devices a claim was allocated, never
// one device for two claims. No kubelet runs on the lab's dynamic nodes:
// the test calls the driver's socket as the kubelet would.
func TestDRADriverPublishesAndPreparesExactDevices(t *testing.T) {
	e := newNodeSetEnv(t, "dra")
	e.env = []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}
	node := e.l.DynNodeNames()[0]
	e.start([]string{node}, 1)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: draNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// One slice, 8 devices, gresIndex 0..7: the fake GPUs are
	// /var/lib/fakegpu/nvidia0..7, so index i is minor i and UUID GPU-lab-i.
	devs := nodeSlice(t, e.c, node, 8)
	for i, d := range devs {
		if d.gresIndex != i || d.minor != i || d.uuid != fmt.Sprintf("GPU-lab-%d", i) || d.name != fmt.Sprintf("gpu-%d", i) {
			t.Errorf("device %d: %+v", i, d)
		}
	}

	// A Slurm job takes 4 GPUs, two more jobs 2 each: the claims get
	// those two jobs' GPUs, chosen by the gresIndex the slice publishes.
	job := e.sbatchGres(node, 4)
	held := jobGresIndexes(t, e, job)
	if len(held) != 4 {
		t.Fatalf("job %s holds GRES indices %v, want 4", job, held)
	}
	jobA, jobB := e.sbatchGres(node, 2), e.sbatchGres(node, 2)
	of := func(job string) []draDevice {
		idx := jobGresIndexes(t, e, job)
		var out []draDevice
		for _, d := range devs {
			if slices.Contains(idx, d.gresIndex) {
				out = append(out, d)
			}
		}
		if len(out) != 2 {
			t.Fatalf("job %s holds GRES indices %v", job, idx)
		}
		return out
	}
	devsA, devsB := of(jobA), of(jobB)
	t.Logf("job %s holds IDX %v; claims take %v (job %s) and %v (job %s)", job, held, devsA, jobA, devsB, jobB)

	plugin, cdiDir := agentDRA(t, e.l, node)

	suffix := strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	a := handClaim(t, e.c, "a-"+suffix, node, jobA, devsA)
	b := handClaim(t, e.c, "b-"+suffix, node, jobB, devsB)
	t.Cleanup(func() {
		for _, cl := range []*resourceapi.ResourceClaim{a, b} {
			_ = e.c.Delete(context.Background(), cl)
		}
	})
	t.Cleanup(func() { // idempotent: nothing left prepared if the test stops early
		for _, cl := range []*resourceapi.ResourceClaim{a, b} {
			unprepare(t, plugin, cl)
		}
	})
	for _, cl := range []struct {
		claim *resourceapi.ResourceClaim
		devs  []draDevice
	}{{a, devsA}, {b, devsB}} {
		res := prepare(t, plugin, cl.claim)
		if res.GetError() != "" || len(res.Devices) != len(cl.devs) {
			t.Fatalf("prepare %s: %+v", cl.claim.Name, res)
		}
		var want []string
		for _, d := range cl.devs {
			want = append(want, fmt.Sprintf("/var/lib/fakegpu/nvidia%d", d.minor))
		}
		got := cdiNodes(t, filepath.Join(cdiDir, "onepool.dev-gpu_"+string(cl.claim.UID)+".json"))
		if !slices.Equal(got, want) {
			t.Errorf("claim %s: CDI spec device nodes %v, want %v", cl.claim.Name, got, want)
		}
		for _, p := range got {
			if fi, err := os.Stat(filepath.Join(e.l.RootFS(), p)); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
				t.Errorf("%s is not a character device in the chroot: %v", p, err)
			}
		}
		// The driver's libraries and nvidia-smi go with the GPUs, where
		// CUDA images look, as files the runtime can mount.
		mounts := cdiMounts(t, filepath.Join(cdiDir, "onepool.dev-gpu_"+string(cl.claim.UID)+".json"))
		for _, want := range []string{"/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/local/nvidia/bin/nvidia-smi"} {
			host, ok := mounts[want]
			if !ok {
				t.Errorf("claim %s: CDI spec mounts no %s: %v", cl.claim.Name, want, mounts)
				continue
			}
			if fi, err := os.Stat(filepath.Join(e.l.RootFS(), host)); err != nil || !fi.Mode().IsRegular() || !strings.HasPrefix(host, lab.FakeDriverRoot+"/") {
				t.Errorf("claim %s: %s from %s, not a file of the driver root: %v", cl.claim.Name, want, host, err)
			}
		}
		// The kubelet repeats calls; the answer is the same.
		if again := prepare(t, plugin, cl.claim); again.GetError() != "" || len(again.Devices) != len(cl.devs) {
			t.Errorf("repeat prepare %s: %+v", cl.claim.Name, again)
		}
	}

	// A claim of job A's GPUs while a holds them is refused, and says by whom.
	c := handClaim(t, e.c, "c-"+suffix, node, jobA, devsA)
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), c) })
	res := prepare(t, plugin, c)
	if !strings.Contains(res.GetError(), "already prepared for another claim") || !strings.Contains(res.GetError(), a.Name) {
		t.Errorf("prepare of a held device: %+v, want a refusal naming %s", res, a.Name)
	}

	// a ends: its devices go to c.
	unprepare(t, plugin, a)
	if _, err := os.Stat(filepath.Join(cdiDir, "onepool.dev-gpu_"+string(a.UID)+".json")); !os.IsNotExist(err) {
		t.Errorf("a's CDI spec is still there after unprepare: %v", err)
	}
	if res := prepare(t, plugin, c); res.GetError() != "" || len(res.Devices) != 2 || res.Devices[0].DeviceName != devsA[0].name {
		t.Errorf("prepare after the holder ended: %+v", res)
	}

	// A claim whose devices are not the GPUs Slurm gave its job on this
	// node (job B's claim written with the first job's GPUs, or one that
	// names no job) is refused, naming both sets, and nothing is prepared.
	wrong := handClaim(t, e.c, "d-"+suffix, node, jobB, devs[held[0]:held[0]+1])
	none := handClaim(t, e.c, "e-"+suffix, node, "", devs[held[1]:held[1]+1])
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), wrong); _ = e.c.Delete(context.Background(), none) })
	if res := prepare(t, plugin, wrong); !strings.Contains(res.GetError(), "Slurm job "+jobB+" holds") {
		t.Errorf("prepare of another job's GPU: %+v, want refused naming job %s", res, jobB)
	}
	if res := prepare(t, plugin, none); !strings.Contains(res.GetError(), "names no Slurm job") {
		t.Errorf("prepare of a claim naming no job: %+v, want refused", res)
	}
	unprepare(t, plugin, b)
	unprepare(t, plugin, c)
	for _, j := range []string{job, jobA, jobB} {
		e.scancel(j)
	}
}

// claimPod is a onepool pod whose 2 GPUs come through its onepool GPU
// claim (what onepool's webhook makes of nvidia.com/gpu: 2), in the
// lab's dynamic-node partition.
func claimPod(e *schedEnv, name, claim string, gpus int) *corev1.Pod {
	p := e.pod(name, 0, map[string]string{keys.AnnotationJobPartition: dynPartition, keys.AnnotationGPUs: strconv.Itoa(gpus)})
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: keys.PodClaimGPUs, ResourceClaimName: &claim}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: keys.PodClaimGPUs}}
	return p
}

func gpuClaimObj(ns, name string, n int) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: keys.GPUDeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(n)},
		}}}},
	}
}

// On one 8-GPU node: a Slurm job with 4 GPUs, then two onepool pods with 2
// each. Each pod's claim holds exactly the devices of its job's GRES
// indices (scontrol show job -d), the three sets are disjoint, and the CDI
// spec the agent writes for each claim lists exactly those device nodes.
// When a pod goes, its claim is released and its GPUs serve the next pod.
func TestGPUClaimHoldsTheGPUsSlurmGave(t *testing.T) {
	ne := newNodeSetEnv(t, "dra-sched")
	ne.env = []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}
	node := ne.l.DynNodeNames()[0]
	ne.start([]string{node}, 1)
	devs := nodeSlice(t, ne.c, node, 8)
	byName := map[string]int{}
	for _, d := range devs {
		byName[d.name] = d.gresIndex
	}
	e := newGPUClaimsEnv(t)
	ctx := context.Background()

	job := ne.sbatchGres(node, 4)
	taken := map[int]string{}
	for _, i := range jobGresIndexes(t, ne, job) {
		taken[i] = "slurm job " + job
	}

	plugin, cdiDir := agentDRA(t, ne.l, node)

	claims := e.kc.ResourceV1().ResourceClaims(e.ns)
	// No kubelet unprepares for a pod that went: the test does, for every
	// claim it prepared, so the node's agent holds nothing afterwards.
	var prepared []*resourceapi.ResourceClaim
	t.Cleanup(func() {
		for _, c := range prepared {
			unprepare(t, plugin, c)
		}
	})
	check := func(pod string) *resourceapi.ResourceClaim {
		t.Helper()
		if got := e.waitBound(pod, 60*time.Second); got != node {
			t.Fatalf("pod %s bound to %s, want %s", pod, got, node)
		}
		p := e.withJobID(pod)
		id := p.Annotations[keys.AnnotationJobID]
		idx := jobGresIndexes(t, ne, id)
		var claimName string
		for _, rc := range p.Spec.ResourceClaims {
			if rc.Name == keys.PodClaimGPUs && rc.ResourceClaimName != nil {
				claimName = *rc.ResourceClaimName
			}
		}
		claim, err := claims.Get(ctx, claimName, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			t.Fatalf("claim of %s: %v %+v", pod, err, claim)
		}
		if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != p.UID {
			t.Errorf("claim of %s reserved for %+v", pod, claim.Status.ReservedFor)
		}
		var got []int
		var wantNodes []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != keys.GPUDriverName || r.Pool != node {
				t.Errorf("claim of %s: result %+v", pod, r)
			}
			got = append(got, byName[r.Device])
			wantNodes = append(wantNodes, fmt.Sprintf("/var/lib/fakegpu/nvidia%d", byName[r.Device]))
		}
		if !slices.Equal(got, idx) {
			t.Errorf("pod %s: claim holds GRES indices %v, its job %s has IDX %v", pod, got, id, idx)
		}
		for _, i := range idx {
			if by, dup := taken[i]; dup {
				t.Errorf("GRES index %d given to %s and to pod %s", i, by, pod)
			}
			taken[i] = "pod " + pod
		}
		// The kubelet's call (none runs on lab dynamic nodes): the agent
		// prepares exactly those devices.
		res := prepare(t, plugin, claim)
		if res.GetError() != "" {
			t.Fatalf("prepare claim of %s: %s", pod, res.GetError())
		}
		prepared = append(prepared, claim)
		if nodes := cdiNodes(t, filepath.Join(cdiDir, "onepool.dev-gpu_"+string(claim.UID)+".json")); !slices.Equal(nodes, wantNodes) {
			t.Errorf("pod %s: CDI device nodes %v, want %v", pod, nodes, wantNodes)
		}
		if ok, seen := e.eventSoon(pod, keys.EventGPUsAllocated, "Slurm job "+id); !ok {
			t.Errorf("pod %s: no %s event naming job %s: %s", pod, keys.EventGPUsAllocated, id, seen)
		}
		return claim
	}
	for _, name := range []string{"infer-a", "infer-b"} {
		if _, err := claims.Create(ctx, gpuClaimObj(e.ns, name+"-gpus", 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.create(claimPod(e, name, name+"-gpus", 2))
	}
	a := check("infer-a")
	check("infer-b")

	// infer-a goes: the kubelet unprepares, the claim controller releases
	// the claim; a new pod gets infer-a's GPUs (the only ones free).
	zero := int64(0)
	if err := e.kc.CoreV1().Pods(e.ns).Delete(ctx, "infer-a", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	unprepare(t, plugin, a)
	eventually(t, 60*time.Second, "infer-a's claim released", func() (bool, string) {
		c, err := claims.Get(ctx, "infer-a-gpus", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0, fmt.Sprintf("reservedFor %v, allocated %v", c.Status.ReservedFor, c.Status.Allocation != nil)
	})
	for i, by := range taken {
		if by == "pod infer-a" {
			delete(taken, i)
		}
	}
	// infer-c asks nvidia.com/gpu: 2 as pods always have: onepool's
	// webhook turns that into a claim it names, and the scheduler makes
	// the claim (owned by the pod) and allocates it.
	pc := e.create(e.pod("infer-c", 2, map[string]string{keys.AnnotationJobPartition: dynPartition}))
	if _, asks := pc.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; asks || pc.Annotations[keys.AnnotationGPUs] != "2" || len(pc.Spec.ResourceClaims) != 1 {
		t.Fatalf("infer-c as admitted: limits %v, annotations %v, claims %+v", pc.Spec.Containers[0].Resources.Limits, pc.Annotations, pc.Spec.ResourceClaims)
	}
	if c := check("infer-c"); len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != pc.UID {
		t.Errorf("the claim onepool made for infer-c: owners %+v", c.OwnerReferences)
	}

	// A onepool pod that brings a claim of its own is refused at create,
	// with the reason.
	own := e.pod("own-claim", 0, nil)
	own.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("nic-1")}}
	if _, err := e.kc.CoreV1().Pods(e.ns).Create(ctx, own, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `resource claim "nic"`) {
		t.Errorf("a pod with its own claim: %v; want a refusal naming the claim", err)
	}
	ne.scancel(job)
}

// slurm.onepool.dev/exclusive: "node" gives the pod's job its whole node
// (a Slurm job asking one GPU there waits), "user" shares it only with
// the same user's jobs; Slurm says so in scontrol show job: 24.11 as
// OverSubscribe=NO / USER, 26.05 as OverSubscribe=NO and, for a user's,
// Exclusive=USER.
func TestSchedulerExclusiveModes(t *testing.T) {
	e := newSchedEnv(t)
	for _, mode := range []struct{ ann, oversubscribe string }{{"node", "NO"}, {"user", "USER"}} {
		name := "excl-" + mode.ann
		e.create(e.pod(name, 1, map[string]string{keys.AnnotationJobExclusive: mode.ann}))
		node := e.waitBound(name, 60*time.Second)
		job := e.onlyJob(name)
		kv := scontrolJob(t, e.l, job.ID)
		shown := kv["OverSubscribe"]
		if mode.ann == "user" && kv["Exclusive"] == "USER" {
			shown = "USER" // 26.05
		}
		if shown != mode.oversubscribe {
			t.Errorf("%s: job %d OverSubscribe=%s Exclusive=%s, want %s", name, job.ID, kv["OverSubscribe"], kv["Exclusive"], mode.oversubscribe)
		}
		if mode.ann != "node" {
			continue
		}
		// The node has 7 free GPUs, but the job holds the whole node.
		out := e.slurm("sbatch", "-w", node, "--gres=gpu:1", "-o", "/dev/null", "-J", "e2e-excl", "--wrap", "sleep 60")
		m := jobIDRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("sbatch: %s", out)
		}
		t.Cleanup(func() { e.slurm("scancel", m[1]) })
		time.Sleep(3 * time.Second)
		id, _ := strconv.Atoi(m[1])
		if kv := scontrolJob(t, e.l, uint32(id)); kv["JobState"] != "PENDING" {
			t.Errorf("a 1-GPU job on %s beside an exclusive pod: %s (%s), want PENDING", node, kv["JobState"], kv["Reason"])
		}
	}
}
