package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
)

// A pod's node selector reaches Slurm (issue 36). With every node free,
// the job of a pod whose selector matches only the last node runs there
// (Slurm leaves the others out: ExcNodeList), and the pod binds there. A
// pod no node fits asks Slurm nothing and says why, in kube-scheduler's
// words; once a Node is labelled to fit it, it is placed.
func TestSchedulerNodeSelectorReachesSlurm(t *testing.T) {
	e := newSchedEnv(t)
	nodes := e.l.NodeNames()
	first, last := nodes[0], nodes[len(nodes)-1]
	key := "e2e.onepool.dev/" + e.ns // this test's own label
	e.labelNode(last, key, "picked")

	p := e.pod("picky", 1, nil)
	p.Spec.NodeSelector = map[string]string{key: "picked"}
	e.create(p)
	if got := e.waitBound("picky", 30*time.Second); got != last {
		t.Fatalf("picky bound to %s, want %s (the only node its selector matches)", got, last)
	}
	sj := scontrolJob(t, e.l, e.onlyJob("picky").ID)
	if sj["NodeList"] != last {
		t.Errorf("picky's job runs on %s, want %s", sj["NodeList"], last)
	}
	for _, n := range nodes[:len(nodes)-1] {
		if !strings.Contains(expandForTest(t, sj["ExcNodeList"]), n) {
			t.Errorf("picky's job does not leave out %s: ExcNodeList=%s", n, sj["ExcNodeList"])
		}
	}

	q := e.pod("nowhere", 1, nil)
	q.Spec.NodeSelector = map[string]string{key: "nowhere"}
	e.create(q)
	msg := e.waitPendingWith("nowhere", "no Slurm node fits the pod", 20*time.Second)
	if want := "node(s) didn't match Pod's node affinity/selector"; !strings.Contains(msg, want) {
		t.Errorf("pending message lacks %q: %s", want, msg)
	}
	eventually(t, 10*time.Second, keys.EventNoNodeFits+" event", func() (bool, string) {
		return e.hasEvent("nowhere", keys.EventNoNodeFits, "didn't match Pod's node affinity/selector")
	})
	e.holdsPod(5*time.Second, "nowhere", func(p *corev1.Pod) (bool, string) {
		js := e.jobs("nowhere")
		return len(js) == 0 && p.Spec.NodeName == "", fmt.Sprintf("jobs %v, node %q", jobIDs(js), p.Spec.NodeName)
	})

	e.labelNode(first, key, "nowhere")
	if got := e.waitBound("nowhere", 30*time.Second); got != first {
		t.Fatalf("nowhere bound to %s, want %s (labelled for it)", got, first)
	}
}

// labelNode sets a label on a Node until the test ends.
func (e *schedEnv) labelNode(node, key, value string) {
	e.t.Helper()
	patch := func(v any) error {
		b := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
		_, err := e.kc.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(b), metav1.PatchOptions{})
		return err
	}
	if err := patch(fmt.Sprintf("%q", value)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := patch("null"); err != nil {
			e.t.Errorf("removing label %s from %s: %v", key, node, err)
		}
	})
}

// A job Slurm starts on a node its pod can no longer use (the Node lost the
// label the pod selects after the job was asked) is given back at once with
// a SlurmJobMisplaced event, holds no GPU, and the next job leaves that
// node out: the pod binds where its selector matches.
func TestSchedulerJobOnANodeThePodCannotUseIsGivenBack(t *testing.T) {
	e := newSchedEnv(t)
	nodes := e.l.NodeNames()
	x, y := nodes[0], nodes[1]
	key := "e2e.onepool.dev/" + e.ns
	e.labelNode(x, key, "ok")
	e.labelNode(y, key, "ok")
	fill := func(name, node string) {
		p := e.pod(name, 8, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		e.create(p)
		if got := e.waitBound(name, 30*time.Second); got != node {
			t.Fatalf("%s bound to %s, want %s", name, got, node)
		}
	}
	fill("fill-x", x)
	fill("fill-y", y)

	p := e.pod("picky", 1, nil)
	p.Spec.NodeSelector = map[string]string{key: "ok"}
	e.create(p)
	e.waitPendingWith("picky", "PENDING", 30*time.Second)
	first := e.onlyJob("picky")

	// Neither node fits picky now. y goes first (the waiting job is told
	// to leave y out), then x: no exclusion can say that (a waiting job's
	// excluded nodes follow Node changes only while some node fits), so
	// its job waits as it was, and Slurm starts it on x once x frees.
	e.labelNode(y, key, "no")
	e.labelNode(x, key, "no")
	if err := e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), "fill-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 45*time.Second, keys.EventJobMisplaced+" event naming "+x, func() (bool, string) {
		return e.hasEvent("picky", keys.EventJobMisplaced, fmt.Sprintf("Slurm job %d started on %s", first.ID, x))
	})
	// Cancelled at once; Slurm may keep it COMPLETING a while on a busy
	// machine (seen 20 s in a make ci-fresh).
	eventually(t, 45*time.Second, fmt.Sprintf("job %d given back", first.ID), func() (bool, string) {
		st := scontrolJob(t, e.l, first.ID)["JobState"]
		return st == "CANCELLED" || st == "COMPLETED", st
	})
	if got, _ := e.get("picky"); got.Spec.NodeName != "" {
		t.Fatalf("picky bound to %s, where its selector does not match", got.Spec.NodeName)
	}

	// y fits again: the next job leaves x out; it waits for y, and runs
	// there once y frees.
	e.labelNode(y, key, "ok")
	if err := e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), "fill-y", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.waitBound("picky", 45*time.Second); got != y {
		t.Fatalf("picky bound to %s, want %s", got, y)
	}
	again := e.activeJobs("picky")
	if len(again) != 1 || again[0].ID == first.ID {
		t.Fatalf("active jobs of picky: %v; want one new job", jobIDs(again))
	}
	if exc := expandForTest(t, scontrolJob(t, e.l, again[0].ID)["ExcNodeList"]); !strings.Contains(exc, x) {
		t.Errorf("the new job does not leave out %s: ExcNodeList=%s", x, exc)
	}
}

// The README's plain nvidia.com/gpu pod, turned into a GPU claim by the
// webhook, works on the lab's static nodes as on any onepool node: they
// publish their GPUs as DRA devices (the node agent's driver beside their
// slurmd), the pod binds where Slurm ran its job, and its claim holds the
// devices of the job's GRES indices there. (A node that publishes none is
// left out: TestGPUClaimOnANodeWithoutDevicesIsNeverBound.)
func TestSchedulerREADMEGPUPodGetsItsJobsGPUs(t *testing.T) {
	e := newGPUClaimsEnv(t)
	e.create(e.pod("claims", 2, nil))
	node := e.waitBound("claims", 30*time.Second)
	p := e.withJobID("claims")
	id := p.Annotations[keys.AnnotationJobID]
	out := e.slurm("scontrol", "show", "job", "-d", id)
	idx := parseGresIndexes(t, out)
	if len(idx) != 2 {
		t.Fatalf("job %s: GRES indices %v, want 2:\n%s", id, idx, out)
	}
	ctx := context.Background()
	devIndex := map[string]int{}
	for _, d := range nodeSlice(t, clientFor(t, e), node, 8) {
		devIndex[d.name] = d.gresIndex
	}
	var claimName string
	for _, rc := range p.Spec.ResourceClaims {
		if rc.Name == keys.PodClaimGPUs && rc.ResourceClaimName != nil {
			claimName = *rc.ResourceClaimName
		}
	}
	claim, err := e.kc.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil {
		t.Fatalf("claim %q of the pod: %v, allocated %v", claimName, err, claim != nil && claim.Status.Allocation != nil)
	}
	var got []int
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != keys.GPUDriverName || r.Pool != node {
			t.Errorf("claim result %+v: want driver %s, pool %s", r, keys.GPUDriverName, node)
		}
		got = append(got, devIndex[r.Device])
	}
	slices.Sort(got)
	if !slices.Equal(got, idx) {
		t.Errorf("the claim holds GRES indices %v on %s; Slurm job %s has %v", got, node, id, idx)
	}
}

// A job waiting in Slurm's queue follows Node changes: its pod's only node
// is full, another Node is labelled for the pod meanwhile, and Slurm is
// told the job may use it (ExcNodeList loses it); the job runs there and
// the pod binds, without a new job.
func TestSchedulerWaitingJobFollowsNodeLabels(t *testing.T) {
	e := newSchedEnv(t)
	nodes := e.l.NodeNames()
	first, last := nodes[0], nodes[len(nodes)-1]
	key := "e2e.onepool.dev/" + e.ns
	e.labelNode(last, key, "picked")
	out := e.slurm("sbatch", "-p", "main", "-w", last, "--gres=gpu:8", "-J", "e2e-full-"+e.ns, "-o", "/dev/null", "--wrap", "sleep 600")
	m := jobIDRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sbatch: %s", out)
	}
	blocker := m[1]
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", blocker) })
	eventually(t, 30*time.Second, "the job filling "+last+" runs", func() (bool, string) {
		s := strings.TrimSpace(e.slurm("squeue", "-h", "-j", blocker, "-o", "%T"))
		return s == "RUNNING", s
	})

	p := e.pod("waiting", 1, nil)
	p.Spec.NodeSelector = map[string]string{key: "picked"}
	e.create(p)
	var id uint32
	eventually(t, 30*time.Second, "waiting's job pends, leaving out "+first, func() (bool, string) {
		js := e.activeJobs("waiting")
		if len(js) != 1 {
			return false, fmt.Sprint(jobIDs(js))
		}
		id = js[0].ID
		sj := scontrolJob(t, e.l, id)
		return sj["JobState"] == "PENDING" && strings.Contains(expandForTest(t, sj["ExcNodeList"]), first), sj["JobState"] + " ExcNodeList=" + sj["ExcNodeList"]
	})

	e.labelNode(first, key, "picked")
	if got := e.waitBound("waiting", 60*time.Second); got != first {
		t.Fatalf("waiting bound to %s, want %s (labelled for it while its job waited)", got, first)
	}
	// (An immediate allocation Slurm refused first stays listed, FAILED.)
	if js := e.activeJobs("waiting"); len(js) != 1 || js[0].ID != id {
		t.Errorf("want the one live job %d, Slurm lists %v", id, jobIDs(e.jobs("waiting")))
	}
	if ex := scontrolJob(t, e.l, id)["ExcNodeList"]; strings.Contains(expandForTest(t, ex), first) {
		t.Errorf("the job still leaves out %s: ExcNodeList=%s", first, ex)
	}
}

// clientFor is a controller-runtime client of the lab, for helpers that
// take one.
func clientFor(t *testing.T, e *schedEnv) client.Client {
	t.Helper()
	c, err := e.l.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
