package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// A LeaderWorkerSet (the lab runs its real controller and webhooks) of one
// group, a leader and a worker of 8 GPUs each, on a pool Slurm's jobs
// fill: the group waits as one 2-node job, nothing bound; when the GPUs
// free, both pods start together on that job's two nodes. A high-QOS
// training job over every node preempts the group's job: both pods go,
// LeaderWorkerSet makes the group again, and it waits, one job again,
// none of its pods bound, until the training ends; then it runs again.
func TestWorkloadLeaderWorkerSetGroupIsOneJob(t *testing.T) {
	e := newSchedEnv(t)
	hold := e.holdGPUs(labPoolGPUs, "")
	eventually(t, 60*time.Second, "Slurm's jobs hold every GPU", func() (bool, string) {
		n := e.runningTasks(hold)
		return n == labPoolGPUs, fmt.Sprintf("%d running", n)
	})
	uid := e.createLWS("vllm", 1, 2, 8)
	group := e.lwsGroup("vllm", 2, 60*time.Second)
	for _, p := range group {
		e.waitPendingWith(p.Name, "PENDING (", 60*time.Second)
	}
	job := e.onlyJob("vllm/0")
	if n := scontrolJob(t, e.l, job.ID)["NumNodes"]; !twoNodes(n) || !strings.Contains(job.Comment, ";uid="+uid+";") || job.Name != "onepool/"+e.ns+"/vllm/0" {
		t.Fatalf("the group's job %d: %s nodes, name %q, comment %q; want 2 nodes for LeaderWorkerSet uid %s", job.ID, n, job.Name, job.Comment, uid)
	}

	e.slurm("scancel", hold)
	first := e.lwsRunsOnItsJob("vllm", 2, 90*time.Second)

	train := strings.TrimSpace(e.slurm("sbatch", "--parsable", "-J", uniqueName("train"), "-p", lab.Partition, "--qos=high",
		fmt.Sprintf("--nodes=%d", len(e.l.NodeNames())), "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600"))
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", train) })
	eventually(t, 90*time.Second, "the training job runs", func() (bool, string) {
		return e.runningTasks(train) == 1, fmt.Sprintf("group: %s", replicaStates(e.lwsPods("vllm")))
	})
	for _, p := range group {
		if ok, seen := e.eventSoon(p.Name, keys.EventJobPreempted, "Slurm began preempting job"); !ok {
			t.Errorf("%s: no %s event; events: %s", p.Name, keys.EventJobPreempted, seen)
		}
	}
	again := e.lwsGroup("vllm", 2, 60*time.Second)
	for _, p := range again {
		if slices.ContainsFunc(first, func(o corev1.Pod) bool { return o.UID == p.UID }) {
			t.Errorf("%s outlived the preemption of its group's job", p.Name)
		}
		e.waitPendingWith(p.Name, "PENDING (", 60*time.Second)
	}
	if js := slices.DeleteFunc(e.activeJobs("vllm/0"), refusedAllocation); len(js) != 1 || !twoNodes(scontrolJob(t, e.l, js[0].ID)["NumNodes"]) {
		t.Errorf("the group made again waits as active jobs %v, want one of 2 nodes", jobIDs(js))
	}
	e.slurm("scancel", train)
	e.lwsRunsOnItsJob("vllm", 2, 90*time.Second)
}

// createLWS makes LeaderWorkerSet name: groups groups of size pods (a
// leader and size-1 workers) asking gpus GPUs each, with the schedEnv's pod
// template; it returns its uid. At cleanup it is deleted and its
// StatefulSets awaited gone, before the namespace's pods are.
func (e *schedEnv) createLWS(name string, groups, size, gpus int64) string {
	e.t.Helper()
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&e.pod("", gpus, nil).Spec)
	if err != nil {
		e.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{"replicas": groups, "leaderWorkerTemplate": map[string]any{
			"size": size, "workerTemplate": map[string]any{"spec": tmpl},
		}},
	}}
	return e.createWorkload(scheduler.LeaderWorkerSetGVR, u, func(ctx context.Context) (int, error) {
		sts, err := e.kc.AppsV1().StatefulSets(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return len(sts.Items), nil
	})
}

// lwsPods lists the live (not terminating) pods of LeaderWorkerSet name
// (of its group index group, when given).
func (e *schedEnv) lwsPods(name string, group ...string) []corev1.Pod {
	e.t.Helper()
	sel := keys.LabelLWSName + "=" + name
	if len(group) > 0 {
		sel += "," + keys.LabelLWSGroupIndex + "=" + group[0]
	}
	l, err := e.kc.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// lwsGroup waits until LeaderWorkerSet name's group 0 has its size pods.
func (e *schedEnv) lwsGroup(name string, size int, timeout time.Duration) []corev1.Pod {
	e.t.Helper()
	var pods []corev1.Pod
	eventually(e.t, timeout, fmt.Sprintf("LeaderWorkerSet %s: %d pods", name, size), func() (bool, string) {
		pods = e.lwsPods(name)
		return len(pods) == size, replicaStates(pods)
	})
	return pods
}

// lwsRunsOnItsJob waits until group 0 of LeaderWorkerSet name runs: every
// pod bound, each on its own node of the group's one running job.
func (e *schedEnv) lwsRunsOnItsJob(name string, size int, timeout time.Duration) []corev1.Pod {
	return e.lwsGroupRuns(name, "0", size, timeout)
}

// lwsGroupRuns waits until group of LeaderWorkerSet name runs: every pod
// bound, each on its own node of the group's one running job.
func (e *schedEnv) lwsGroupRuns(name, group string, size int, timeout time.Duration) []corev1.Pod {
	e.t.Helper()
	var pods []corev1.Pod
	eventually(e.t, timeout, "LeaderWorkerSet "+name+" group "+group+" runs on its job's nodes", func() (bool, string) {
		pods = e.lwsPods(name, group)
		return e.gangRuns(pods, name+"/"+group, size)
	})
	return pods
}

// twoNodes: scontrol's NumNodes of a job of exactly 2 nodes (a pending
// job's reads "2-2").
func twoNodes(n string) bool { return n == "2" || n == "2-2" }

// A rolling update of a LeaderWorkerSet of two groups (2 pods of 8 GPUs
// each: the whole pool): LeaderWorkerSet remakes one group at a time, and
// at no moment does a bound pod hold GPUs Slurm did not give: every bound
// pod is on a node of its group's running job, and the bound pods' GPUs
// never exceed what the running group jobs hold. Both groups end on the
// new template, each on its own job.
func TestWorkloadLeaderWorkerSetRollingUpdateHoldsOnlyWhatSlurmGave(t *testing.T) {
	e := newSchedEnv(t)
	e.createLWS("vllm", 2, 2, 8)
	e.lwsGroupRuns("vllm", "0", 2, 90*time.Second)
	before := e.lwsGroupRuns("vllm", "1", 2, 90*time.Second)[0].Labels[lwsRevision]

	patch := `{"spec":{"leaderWorkerTemplate":{"workerTemplate":{"metadata":{"annotations":{"rollout":"2"}}}}}}`
	if _, err := e.dynamic().Resource(scheduler.LeaderWorkerSetGVR).Namespace(e.ns).Patch(context.Background(), "vllm",
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 180*time.Second, "both groups on the new template", func() (bool, string) {
		// Slurm's jobs listed before and after the pods: a pod bound when
		// listed had its job running then, so in one of the two lists.
		jobs := map[string]slurmrest.Job{}
		running := func() {
			for _, j := range e.activeJobs("vllm/") {
				if j.State.Base() == slurmrest.JobRunning {
					jobs[j.Name] = j
				}
			}
		}
		running()
		pods := e.lwsPods("vllm")
		running()
		bound, held := 0, 0
		for _, j := range jobs {
			held += 8 * len(strings.Fields(expandForTest(t, j.Nodes)))
		}
		updated := 0
		for _, p := range pods {
			if p.Labels[lwsRevision] != before {
				updated++
			}
			if p.Spec.NodeName == "" {
				continue
			}
			bound++
			j, ok := jobs["onepool/"+e.ns+"/vllm/"+p.Labels[keys.LabelLWSGroupIndex]]
			if !ok || !strings.Contains(expandForTest(t, j.Nodes), p.Spec.NodeName) {
				t.Fatalf("%s bound to %s, outside any running job of its group (running: %v)", p.Name, p.Spec.NodeName, jobIDs(slices.Collect(maps.Values(jobs))))
			}
		}
		if bound*8 > held {
			t.Fatalf("%d pods bound hold %d GPUs; Slurm gave the groups' jobs %d", bound, bound*8, held)
		}
		return updated == 4 && bound == 4, fmt.Sprintf("%d of 4 pods updated, %d bound; %s", updated, bound, replicaStates(pods))
	})
	e.lwsGroupRuns("vllm", "0", 2, 30*time.Second)
	e.lwsGroupRuns("vllm", "1", 2, 30*time.Second)
}

// lwsRevision is LeaderWorkerSet's label of the template a pod was made from.
const lwsRevision = "leaderworkerset.sigs.k8s.io/template-revision-hash"
