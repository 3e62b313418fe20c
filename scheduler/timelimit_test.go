package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func TestTimeLimitWarning(t *testing.T) {
	yes := true
	owned := func(kind, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &yes}}}}
	}
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	fourHours := &slurmrest.Job{ID: 42, Partition: "short", TimeLimit: 4 * time.Hour, StartTime: start}
	asked := owned("ReplicaSet", "web-5d8f")
	asked.Annotations = map[string]string{keys.AnnotationJobTimeLimit: "4h"}
	lws := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vllm-0-1", Labels: map[string]string{labelLWSName: "vllm"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "vllm-0", Controller: &yes}}}}
	notController := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "x"}}}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		job  *slurmrest.Job
		want string // a part of the warning; "" for none
	}{
		{"a Deployment's replica under the partition's 4 h", owned("ReplicaSet", "web-5d8f"), fourHours,
			"Slurm job 42 of partition short ends at 2026-11-27T14:00:00Z, after its time limit 4h0m0s, which the pod did not ask for; this replica of ReplicaSet web-5d8f is evicted then"},
		{"a StatefulSet's", owned("StatefulSet", "db"), fourHours, "this replica of StatefulSet db"},
		{"a LeaderWorkerSet's, by its label", lws, fourHours, "this replica of LeaderWorkerSet vllm"},
		{"names the annotation to ask with", owned("StatefulSet", "db"), fourHours, "Ask for longer with annotation " + keys.AnnotationJobTimeLimit},
		{"UNLIMITED: nothing", owned("ReplicaSet", "web-5d8f"), &slurmrest.Job{ID: 1, TimeLimit: 0}, ""},
		{"the pod asked for its limit: nothing", asked, fourHours, ""},
		{"a Job's pod ends by design: nothing", owned("Job", "train"), fourHours, ""},
		{"a bare pod: nothing", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, fourHours, ""},
		{"an owner that is not the controller: nothing", notController, fourHours, ""},
		{"no job known: nothing", owned("ReplicaSet", "web"), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := timeLimitWarning(tc.pod, tc.job)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
		})
	}
}
