package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwokCompleteDelay keeps a Job's pod running that long on the lab's kwok
// Nodes before it completes (the lab's pod-complete stage; at once
// without it).
const kwokCompleteDelay = "pod-complete.stage.kwok.x-k8s.io/delay"

// A Job survives preemption as Kubernetes expects: Slurm preempts a
// running shard for a high-QOS job, onepool evicts it with the
// DisruptionTarget condition, and the Job's podFailurePolicy ignores that
// failure, so with backoffLimit 0 the Job makes the shard again and
// completes instead of failing (issue 36 item 3; the policy of
// examples/batch-inference-job.yaml).
func TestWorkloadJobIgnoresAPreemptedShard(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	tmpl := e.pod("", 8, nil) // a whole node: a high-QOS job there must preempt it
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "shard", Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: ptrTo(int32(1)), Completions: ptrTo(int32(1)), BackoffLimit: ptrTo(int32(0)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{kwokCompleteDelay: "20s"}},
				Spec:       tmpl.Spec,
			},
		},
	}
	if _, err := e.kc.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = e.kc.BatchV1().Jobs(e.ns).Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	shards := func() []corev1.Pod { return e.jobPods(job.Name) }
	var first corev1.Pod
	eventually(t, 60*time.Second, "the shard runs on a node", func() (bool, string) {
		for _, p := range shards() {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				first = p
				return true, ""
			}
		}
		return false, fmt.Sprint(len(shards()), " shards")
	})
	e.submitQOSOn(uniqueName("high"), "high", first.Spec.NodeName)
	eventually(t, 120*time.Second, "the Job completes after its preempted shard is made again", func() (bool, string) {
		j, err := e.kc.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobFailed, batchv1.JobFailureTarget:
				t.Fatalf("the Job failed: %s: %s", c.Reason, c.Message)
			case batchv1.JobComplete:
				return true, ""
			}
		}
		return false, fmt.Sprintf("succeeded %d, active %d, failed %d", j.Status.Succeeded, j.Status.Active, j.Status.Failed)
	})
	if ok, seen := e.eventSoon(first.Name, "SlurmJobPreempted", ""); !ok {
		t.Errorf("the first shard %s was not ended by Slurm's preemption; its events: %s", first.Name, seen)
	}
	for _, p := range shards() {
		if p.UID == first.UID {
			t.Errorf("the preempted shard %s is still there (%s)", p.Name, p.Status.Phase)
		}
	}
}
