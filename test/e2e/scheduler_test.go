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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

func TestSchedulerBindsPodWhereSlurmRunsItsJob(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("one-gpu", 1, nil))
	node := e.waitBound("one-gpu", 30*time.Second)

	job := e.onlyJob("one-gpu")
	sj := scontrolJob(t, e.l, job.ID)
	if sj["JobState"] != "RUNNING" || sj["NodeList"] != node || !strings.Contains(sj["TresPerNode"], "gres/gpu:1") {
		t.Fatalf("pod bound to %s; scontrol shows job %d JobState=%s NodeList=%s TresPerNode=%s", node, job.ID, sj["JobState"], sj["NodeList"], sj["TresPerNode"])
	}
	p := e.withJobID("one-gpu")
	if p.Annotations[keys.AnnotationJobID] != fmt.Sprint(job.ID) {
		t.Errorf("pod annotation %s=%q, want %d", keys.AnnotationJobID, p.Annotations[keys.AnnotationJobID], job.ID)
	}
	if ok, seen := e.eventSoon("one-gpu", keys.EventJobSubmitted, fmt.Sprint(job.ID)); !ok {
		t.Errorf("no %s event naming job %d; events: %s", keys.EventJobSubmitted, job.ID, seen)
	}

	// Deleting the pod cancels the job, and the placeholder lets go at once
	// (the release answer), well before KillWait (30 s) would kill it.
	if err := e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), "one-gpu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "job cancelled and completed", func() (bool, string) {
		st := scontrolJob(t, e.l, job.ID)["JobState"]
		node := scontrolNode(t, e.l, node)["State"]
		return st == "CANCELLED" && !strings.Contains(node, "COMPLETING"), "job " + st + ", node " + node
	})
}

func TestSchedulerFullNodesLeaveNextPodPendingWithSlurmsReason(t *testing.T) {
	e := newSchedEnv(t)
	n := len(e.l.NodeNames())
	used := map[string]string{}
	for i := range n {
		e.create(e.pod(fmt.Sprintf("full-%d", i), 8, nil))
	}
	for i := range n {
		name := fmt.Sprintf("full-%d", i)
		node := e.waitBound(name, 30*time.Second)
		if other, ok := used[node]; ok {
			t.Fatalf("%s and %s both bound to %s with 8 GPUs each", name, other, node)
		}
		used[node] = name
	}
	e.create(e.pod("next", 8, nil))
	msg := e.waitPendingWith("next", "PENDING (Resources)", 30*time.Second)
	job := e.onlyJob("next")
	if refused := slices.DeleteFunc(e.jobs("next"), func(j slurmrest.Job) bool { return !refusedAllocation(j) }); len(refused) > 1 {
		t.Errorf("Slurm refused %d immediate allocations for one pod (%v); want at most one, then the queue", len(refused), jobIDs(refused))
	}
	if !strings.Contains(msg, fmt.Sprintf("job %d", job.ID)) {
		t.Errorf("pending message %q does not name job %d", msg, job.ID)
	}
	// Freeing one node lets Slurm start the pending job there.
	freed := e.waitBound("full-0", time.Second)
	if err := e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), "full-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.waitBound("next", 45*time.Second); got != freed {
		t.Errorf("next bound to %s, want the freed node %s", got, freed)
	}
}

func TestSchedulerScancelEvictsPod(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("victim", 2, nil))
	e.waitBound("victim", 30*time.Second)
	job := e.onlyJob("victim")
	e.slurm("scancel", fmt.Sprint(job.ID))
	e.waitGone("victim", 20*time.Second)
	if ok, seen := e.eventSoon("victim", keys.EventJobEnded, "CANCELLED"); !ok {
		t.Errorf("no %s event saying CANCELLED; events: %s", keys.EventJobEnded, seen)
	}
}

func TestSchedulerInvalidAnnotationKeepsPodPending(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("bad", 1, map[string]string{keys.AnnotationJobTimeLimit: "soon"}))
	e.waitPendingWith("bad", "invalid Slurm request", 20*time.Second)
	eventually(t, 10*time.Second, "InvalidSlurmRequest event", func() (bool, string) {
		return e.hasEvent("bad", keys.EventInvalidRequest, keys.AnnotationJobTimeLimit)
	})
	if js := e.jobs("bad"); len(js) != 0 {
		t.Fatalf("a pod with an invalid annotation got jobs %v", jobIDs(js))
	}
	// Fixing the annotation places it.
	p, _ := e.get("bad")
	p.Annotations[keys.AnnotationJobTimeLimit] = "2h"
	if _, err := e.kc.CoreV1().Pods(e.ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitBound("bad", 30*time.Second)
	if tl := scontrolJob(t, e.l, e.onlyJob("bad").ID)["TimeLimit"]; tl != "02:00:00" {
		t.Errorf("TimeLimit=%s, want 02:00:00 from the annotation", tl)
	}
}

// slurm.onepool.dev/time-limit: UNLIMITED asks Slurm for no time limit,
// as `sbatch --time=UNLIMITED` does (a replica that must not be ended at
// the partition's default time).
func TestSchedulerUnlimitedTimeLimit(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("forever", 1, map[string]string{keys.AnnotationJobTimeLimit: "UNLIMITED"}))
	e.waitBound("forever", 30*time.Second)
	if tl := scontrolJob(t, e.l, e.onlyJob("forever").ID)["TimeLimit"]; tl != "UNLIMITED" {
		t.Errorf("TimeLimit=%s, want UNLIMITED from the annotation", tl)
	}
}

func TestSchedulerPodGroupIsOneMultiNodeJob(t *testing.T) {
	e := newSchedEnv(t)
	cfg, err := e.l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "trio", "namespace": e.ns},
		"spec":     map[string]any{"minMember": int64(3)},
	}}
	if _, err := dyn.Resource(scheduler.PodGroupGVR).Namespace(e.ns).Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	member := func(i int) {
		p := e.pod(fmt.Sprintf("trio-%d", i), 8, nil)
		p.Labels = map[string]string{keys.LabelPodGroup: "trio"}
		e.create(p)
	}
	member(0)
	member(1)
	e.waitPendingWith("trio-0", "2 of its 3 pods exist", 20*time.Second)
	if js := e.jobs("trio"); len(js) != 0 {
		t.Fatalf("an incomplete gang got jobs %v", jobIDs(js))
	}
	member(2)
	nodes := map[string]bool{}
	for i := range 3 {
		nodes[e.waitBound(fmt.Sprintf("trio-%d", i), 30*time.Second)] = true
	}
	job := e.onlyJob("trio")
	sj := scontrolJob(t, e.l, job.ID)
	if sj["NumNodes"] != "3" || len(nodes) != 3 {
		t.Fatalf("gang: job %d NumNodes=%s NodeList=%s; pods on %v", job.ID, sj["NumNodes"], sj["NodeList"], nodes)
	}
	for n := range nodes {
		if !strings.Contains(expandForTest(t, sj["NodeList"]), n) {
			t.Errorf("pod bound to %s, outside the job's nodes %s", n, sj["NodeList"])
		}
	}
}

// expandForTest asks Slurm to expand a hostlist.
func expandForTest(t *testing.T, hl string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := lab.Shared(t).Slurm(ctx, "scontrol", "show", "hostnames", hl)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestSchedulerRestartAdoptsJobsWithoutDuplicates(t *testing.T) {
	e := newSchedEnv(t)
	n := len(e.l.NodeNames())
	for i := range n {
		e.create(e.pod(fmt.Sprintf("busy-%d", i), 8, nil))
	}
	bound := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("busy-%d", i)
		bound[name] = e.waitBound(name, 30*time.Second)
	}
	e.create(e.pod("waiting", 8, nil))
	e.waitPendingWith("waiting", "PENDING", 30*time.Second)
	before := map[string]uint32{}
	for name := range bound {
		before[name] = e.onlyJob(name).ID
	}
	before["waiting"] = e.onlyJob("waiting").ID

	if err := e.l.StopScheduler(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.l.StartScheduler(context.Background()); err != nil {
			t.Error(err)
		}
	})
	e.create(e.pod("while-down", 8, nil))
	if err := e.l.StartScheduler(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitPendingWith("while-down", "PENDING", 30*time.Second)
	time.Sleep(3 * time.Second) // a few cache polls and resyncs: room for duplicates to show
	for name, id := range before {
		if got := e.onlyJob(name); got.ID != id {
			t.Errorf("%s: job %d before the restart, %d after", name, id, got.ID)
		}
	}
	e.onlyJob("while-down")
	for name, node := range bound {
		if p, err := e.get(name); err != nil || p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			t.Errorf("%s was on %s before the restart; now %v %v", name, node, p, err)
		}
	}
}

func TestSchedulerSlurmrestdDownKeepsPodsAndJobs(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("running", 1, nil))
	node := e.waitBound("running", 30*time.Second)
	job := e.onlyJob("running")

	end, writesReach := slurmUnknown(t, e.l)
	e.create(e.pod("newcomer", 1, nil))
	msg := e.waitPendingWith("newcomer", "", 15*time.Second)
	eventually(t, 30*time.Second, "a message naming the Slurm outage", func() (bool, string) {
		p, _ := e.get("newcomer")
		msg = scheduledMessage(p)
		// A scheduler that lost Slurm's state says so; one that started
		// (the components were restarted onto the proxy) and never read
		// Slurm's jobs says it submits nothing until it knows them.
		return strings.Contains(msg, "Slurm's state is unknown") || strings.Contains(msg, "cannot submit") ||
			strings.Contains(msg, "nothing is submitted until it knows them"), msg
	})
	t.Logf("pending while Slurm's state is unknown: %s", msg)
	// Past the scheduler's stale bound (10 s in the lab). Its writes would
	// reach Slurm (process mode): a job cancelled now is one it cancelled
	// on a state it could not know.
	holds(t, 12*time.Second, "the running pod and its job untouched while Slurm's state is unknown", func() (bool, string) {
		if p, err := e.get("running"); err != nil || p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			return false, fmt.Sprintf("the running pod was touched: %v %v", p, err)
		}
		if st := scontrolJob(t, e.l, job.ID)["JobState"]; writesReach && st != "RUNNING" {
			return false, fmt.Sprintf("job %d is %s", job.ID, st)
		}
		return true, ""
	})
	end()
	e.waitBound("newcomer", 45*time.Second)
	e.onlyJob("newcomer")
	if j := e.onlyJob("running"); j.ID != job.ID || j.State.Base() != slurmrest.JobRunning {
		t.Errorf("the running pod's job changed: %v", jobIDs([]slurmrest.Job{j}))
	}
}

// A pod Slurm can never place (more GPUs than any node has) waits Pending
// with Slurm's reason and what would fit; the record Slurm keeps of the
// refused job is never taken for its placement, so it is not evicted.
func TestSchedulerImpossiblePodWaitsWithTheReason(t *testing.T) {
	e := newSchedEnv(t)
	created := e.create(e.pod("huge", lab.GPUsPerNode+1, nil))
	msg := e.waitPendingWith("huge", "Slurm can never run it", 30*time.Second)
	for _, want := range []string{fmt.Sprintf("%d nvidia.com/gpu", lab.GPUsPerNode+1), fmt.Sprintf("the largest node offers %d nvidia.com/gpu", lab.GPUsPerNode)} {
		if !strings.Contains(msg, want) {
			t.Errorf("pending message lacks %q: %s", want, msg)
		}
	}
	eventually(t, 10*time.Second, "SlurmJobRejected event", func() (bool, string) {
		return e.hasEvent("huge", keys.EventJobRejected, "Slurm can never run it")
	})
	// Slurm keeps a FAILED record of the refused job with onepool's comment.
	eventually(t, 10*time.Second, "Slurm's record of the refused job", func() (bool, string) {
		js := e.jobs("huge")
		return len(js) > 0 && js[0].State.Finished(), fmt.Sprint(jobIDs(js))
	})
	e.holdsPod(10*time.Second, "huge", func(p *corev1.Pod) (bool, string) {
		return p.UID == created.UID && p.DeletionTimestamp == nil && p.Spec.NodeName == "", fmt.Sprintf("uid %s deleting %v node %q", p.UID, p.DeletionTimestamp != nil, p.Spec.NodeName)
	})
	if ok, msg := e.hasEvent("huge", keys.EventJobEnded, ""); ok {
		t.Errorf("the pod was told its job ended: %s", msg)
	}
	// Slurm is asked again unchanged (a node that fits may have come
	// since), but no sooner than 10 s after its refusal, then twice as
	// long each time: no retry storm.
	var js []slurmrest.Job
	eventually(t, 30*time.Second, "the pod's job asked again after its delay", func() (bool, string) {
		js = e.jobs("huge")
		return len(js) >= 2, fmt.Sprint(jobIDs(js))
	})
	slices.SortFunc(js, func(a, b slurmrest.Job) int { return a.SubmitTime.Compare(b.SubmitTime) })
	for i := 1; i < len(js); i++ {
		// Slurm's times are whole seconds.
		if gap, least := js[i].SubmitTime.Sub(js[i-1].SubmitTime), (10*time.Second)<<(i-1)-time.Second; gap < least {
			t.Errorf("job %d submitted %s after job %d; want at least %s: a retry storm", js[i].ID, gap, js[i-1].ID, least)
		}
	}
}

// A partition that does not exist is named in the rejection.
func TestSchedulerUnknownPartitionNamedInRejection(t *testing.T) {
	e := newSchedEnv(t)
	e.create(e.pod("lost", 1, map[string]string{keys.AnnotationJobPartition: "nosuchpart"}))
	eventually(t, 20*time.Second, "SlurmJobRejected event naming the partition", func() (bool, string) {
		return e.hasEvent("lost", keys.EventJobRejected, `partition "nosuchpart" does not exist in Slurm (from annotation `+keys.AnnotationJobPartition+")")
	})
	e.waitPendingWith("lost", `partition "nosuchpart"`, 10*time.Second)
}
