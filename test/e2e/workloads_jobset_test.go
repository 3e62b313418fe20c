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
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/test/lab"
)

// A JobSet (the lab runs its real controller and webhooks) whose
// replicated job asks to be one gang (slurm.onepool.dev/gang), two Jobs of
// one 8-GPU pod, on a pool Slurm's jobs fill: it waits as one 2-node job,
// nothing bound; when the GPUs free, both pods start together on that
// job's nodes. A high-QOS training job over every node preempts it: the
// pods fail, JobSet restarts (restart attempt 1), and the new pods wait as
// one job until the training ends, then run together again.
func TestWorkloadJobSetReplicatedJobIsOneJob(t *testing.T) {
	e := newSchedEnv(t)
	hold := e.holdGPUs(labPoolGPUs, "")
	eventually(t, 60*time.Second, "Slurm's jobs hold every GPU", func() (bool, string) {
		n := e.runningTasks(hold)
		return n == labPoolGPUs, fmt.Sprintf("%d running", n)
	})
	uid := e.createJobSet("train", 2, 8)
	first := e.jobSetPods("train", "0", 2, 60*time.Second)
	for _, p := range first {
		e.waitPendingWith(p.Name, "PENDING (", 60*time.Second)
	}
	job := e.onlyJob("train/workers/0")
	if n := scontrolJob(t, e.l, job.ID)["NumNodes"]; !twoNodes(n) || !strings.Contains(job.Comment, ";uid="+uid+";") || job.Name != "onepool/"+e.ns+"/train/workers/0" {
		t.Fatalf("the replicated job's job %d: %s nodes, name %q, comment %q; want 2 nodes for JobSet uid %s", job.ID, n, job.Name, job.Comment, uid)
	}

	e.slurm("scancel", hold)
	e.jobSetRunsOnItsJob("train", "0", 2, 90*time.Second)

	train := strings.TrimSpace(e.slurm("sbatch", "--parsable", "-J", uniqueName("train"), "-p", lab.Partition, "--qos=high",
		fmt.Sprintf("--nodes=%d", len(e.l.NodeNames())), "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600"))
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", train) })
	eventually(t, 90*time.Second, "the training job runs", func() (bool, string) {
		return e.runningTasks(train) == 1, ""
	})
	for _, p := range first {
		if ok, seen := e.eventSoon(p.Name, keys.EventJobPreempted, "Slurm began preempting job"); !ok {
			t.Errorf("%s: no %s event; events: %s", p.Name, keys.EventJobPreempted, seen)
		}
	}
	again := e.jobSetPods("train", "1", 2, 90*time.Second)
	for _, p := range again {
		e.waitPendingWith(p.Name, "PENDING (", 60*time.Second)
	}
	if js := slices.DeleteFunc(e.activeJobs("train/workers/1"), refusedAllocation); len(js) != 1 || !twoNodes(scontrolJob(t, e.l, js[0].ID)["NumNodes"]) {
		t.Errorf("the restarted replicated job waits as active jobs %v, want one of 2 nodes", jobIDs(js))
	}
	e.slurm("scancel", train)
	e.jobSetRunsOnItsJob("train", "1", 2, 90*time.Second)
}

// createJobSet makes JobSet name: replicated job "workers" of replicas
// Jobs of one pod asking gpus GPUs, one gang (slurm.onepool.dev/gang),
// restarted up to 3 times after a failure; each pod runs until deleted
// (kwok's Job stage). It returns the JobSet's uid; at cleanup it is deleted
// and its Jobs awaited gone.
func (e *schedEnv) createJobSet(name string, replicas, gpus int64) string {
	e.t.Helper()
	p := e.pod("", gpus, map[string]string{keys.AnnotationGang: keys.GangReplicatedJob, "pod-complete.stage.kwok.x-k8s.io/delay": "1h"})
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p.Spec)
	if err != nil {
		e.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{
			"failurePolicy": map[string]any{"maxRestarts": int64(3)},
			"replicatedJobs": []any{map[string]any{"name": "workers", "replicas": replicas, "template": map[string]any{"spec": map[string]any{
				"parallelism": int64(1), "completions": int64(1), "backoffLimit": int64(0),
				"template": map[string]any{"metadata": map[string]any{"annotations": toAny(p.Annotations)}, "spec": spec},
			}}}},
		},
	}}
	return e.createWorkload(scheduler.JobSetGVR, u, func(ctx context.Context) (int, error) {
		jobs, err := e.kc.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return len(jobs.Items), nil
	})
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// jobSetPods waits until JobSet name's restart attempt has want live pods
// (not terminating, not finished) and returns them.
func (e *schedEnv) jobSetPods(name, attempt string, want int, timeout time.Duration) []corev1.Pod {
	e.t.Helper()
	var pods []corev1.Pod
	eventually(e.t, timeout, fmt.Sprintf("JobSet %s attempt %s: %d pods", name, attempt, want), func() (bool, string) {
		pods = e.liveJobSetPods(name, attempt)
		return len(pods) == want, replicaStates(pods)
	})
	return pods
}

func (e *schedEnv) liveJobSetPods(name, attempt string) []corev1.Pod {
	e.t.Helper()
	l, err := e.kc.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: keys.LabelJobSetName + "=" + name + "," + keys.LabelJobSetRestartAttempt + "=" + attempt})
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
}

// jobSetRunsOnItsJob waits until JobSet name's attempt runs: size pods
// bound, each on its own node of the replicated job's one running job.
func (e *schedEnv) jobSetRunsOnItsJob(name, attempt string, size int, timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, "JobSet "+name+" attempt "+attempt+" runs on its job's nodes", func() (bool, string) {
		return e.gangRuns(e.liveJobSetPods(name, attempt), name+"/workers/"+attempt, size)
	})
}
