package poolview

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

func TestExplain(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	pending := func(id uint32, prio uint32, part string, submit time.Duration) model.Job {
		return model.Job{ID: id, State: model.JobState{"PENDING"}, Reason: "Priority", Partition: part, Priority: prio, SubmitTime: t0.Add(submit)}
	}
	jobs := []model.Job{
		pending(20, 100, "gpu", 0), pending(21, 500, "gpu", time.Second), pending(22, 100, "gpu", -time.Second),
		pending(23, 900, "cpu", 0), {ID: 24, State: model.JobState{"RUNNING"}, Partition: "gpu", Nodes: "gpu-0"},
	}
	for i := range jobs {
		if jobs[i].ID != 22 {
			jobs[i].Comment = keys.PlaceholderCommentPrefix + "pod=ml/infer-0;uid=u-1;user=slurm;sig=AAAA"
		}
	}
	pod := func(job string, scheduler string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "infer-0", UID: "u-1", Annotations: map[string]string{}},
			Spec:   corev1.PodSpec{SchedulerName: scheduler},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "waiting in Slurm's queue"}}}}
		if job != "" {
			p.Annotations[keys.AnnotationJobID] = job
		}
		return p
	}
	ev := func(reason string, at time.Duration) corev1.Event {
		return corev1.Event{Type: "Normal", Reason: reason, LastTimestamp: metav1.NewTime(t0.Add(at))}
	}

	x := Explain(pod("20", keys.SchedulerName), jobs, "team-a (Slurm user a)", []corev1.Event{ev("old", 0), ev("new", time.Minute)})
	require.NotNil(t, x.Job)
	assert.Equal(t, 3, x.Job.Position, "after 21 (higher priority) and 22 (same priority, sooner)")
	assert.Equal(t, 3, x.Job.Pending, "the gpu partition's pending jobs; cpu's not counted")
	assert.Equal(t, "False Unschedulable: waiting in Slurm's queue", x.Scheduled)
	assert.Equal(t, []string{"new", "old"}, []string{x.Events[0].Reason, x.Events[1].Reason}, "newest first")
	var b strings.Builder
	x.Print(&b, t0.Add(2*time.Minute))
	assert.Contains(t, b.String(), "pending: 3 of 3 in partition gpu")
	assert.Contains(t, b.String(), "Policy:     team-a (Slurm user a)")
	assert.Contains(t, b.String(), "1m0s     Normal  new")

	x = Explain(pod("24", keys.SchedulerName), jobs, "", nil)
	assert.Zero(t, x.Job.Position, "a running job has no place in the queue")
	assert.Equal(t, "gpu-0", x.Job.Nodes)

	for _, tc := range []struct{ job, scheduler, note string }{
		{"", keys.SchedulerName, "names no Slurm job yet"},
		{"99", keys.SchedulerName, "job 99 is not in Slurm's listing"},
		{"x", keys.SchedulerName, `is not a job id`},
		{"20", "default-scheduler", `the pod's scheduler is "default-scheduler"`},
		{"22", keys.SchedulerName, "job 22's comment does not name this pod"},
	} {
		x = Explain(pod(tc.job, tc.scheduler), jobs, "", nil)
		assert.Nil(t, x.Job, tc.note)
		assert.Contains(t, x.JobNote, tc.note)
	}
}
