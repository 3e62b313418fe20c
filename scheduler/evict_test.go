package scheduler

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func TestEvictionCause(t *testing.T) {
	began := time.Date(2026, 11, 24, 14, 6, 30, 0, time.UTC)
	running := &slurmrest.Job{ID: 7, QOS: "low", State: slurmrest.JobState{"RUNNING"}, PreemptTime: began, EndTime: began.Add(30 * time.Second)}
	noDeadline := &slurmrest.Job{ID: 7, State: slurmrest.JobState{"RUNNING"}, PreemptTime: began}
	ended := &slurmrest.Job{ID: 7, State: slurmrest.JobState{"PREEMPTED"}, PreemptTime: began, EndTime: began.Add(30 * time.Second)}
	for _, tc := range []struct {
		name     string
		job      *slurmrest.Job
		missing  bool
		reason   string
		label    string
		note     string
		deadline time.Time
	}{
		{"missing", nil, true, keys.EventJobMissing, "job_missing", "Slurm no longer knows placeholder job 7", time.Time{}},
		{"ended after preemption", ended, false, keys.EventJobEnded, "job_ended", "Slurm job 7 ended (PREEMPTED)", time.Time{}},
		{"preemption began", running, false, keys.EventJobPreempted, "preempted",
			"Slurm began preempting job 7 (QOS low) at 2026-11-24T14:06:30Z for a job it ranks higher (QOS/partition preemption); evicting the pod so that it stops before Slurm's deadline 2026-11-24T14:07:00Z (GraceTime 30s)",
			began.Add(30 * time.Second)},
		{"preemption without a deadline", noDeadline, false, keys.EventJobPreempted, "preempted", "Slurm began preempting job 7", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := evictionCause(7, tc.job, tc.missing)
			assert.Equal(t, tc.reason, e.reason)
			assert.Equal(t, tc.label, e.label)
			assert.Contains(t, e.note, tc.note)
			assert.Equal(t, tc.deadline, e.deadline)
		})
	}
}

func TestEvictionGrace(t *testing.T) {
	now := time.Date(2026, 11, 24, 14, 6, 31, 0, time.UTC)
	secs := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name     string
		deadline time.Time
		own      *int64
		want     *int64
	}{
		{"job ended: the pod's own", time.Time{}, secs(120), nil},
		{"cut to end 2 s before the deadline", now.Add(29 * time.Second), nil, secs(27)},
		{"the pod's own when shorter", now.Add(29 * time.Second), secs(5), secs(5)},
		{"deadline about to pass: 1 s", now.Add(time.Second), nil, secs(1)},
		{"deadline past: 1 s", now.Add(-time.Minute), secs(60), secs(1)},
		{"pod asks 0: 1 s", now.Add(29 * time.Second), secs(0), secs(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: tc.own}}
			assert.Equal(t, tc.want, evictionGrace(pod, eviction{deadline: tc.deadline}, now))
		})
	}
}

// A placeholder Slurm begins to preempt (still RUNNING, preempt_time set):
// the pod is evicted at once with a grace that ends before Slurm's
// deadline, the event names the cause, and the job is not cancelled while
// the pod lives.
func TestCoreEvictsPodOfAPreemptedJobBeforeTheDeadline(t *testing.T) {
	f := newCoreFixture(t)
	j := f.job(7, slurmrest.JobRunning, "gpu-1")
	f.core.book.observe(j)
	key := ownerOf(f.pod).key()
	_, err := f.core.life.reconcile(context.Background(), key)
	require.NoError(t, err)
	require.Empty(t, evictions(f), "a running job's pod was evicted")

	j.QOS, j.PreemptTime, j.EndTime = "low", time.Now(), time.Now().Add(30*time.Second)
	f.core.book.observe(j)
	_, err = f.core.life.reconcile(context.Background(), key)
	require.NoError(t, err)
	ev := evictions(f)
	require.Len(t, ev, 1)
	g := ev[0].DeleteOptions.GracePeriodSeconds
	require.NotNil(t, g)
	assert.InDelta(t, 27, *g, 1, "grace ends 2 s before the 30 s deadline")
	assert.Empty(t, f.slurm.cancelled, "the job is cancelled only once the pod is gone")
	rec := f.core.recorder.(*events.FakeRecorder)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	assert.Contains(t, strings.Join(got, "\n"), "Warning "+keys.EventJobPreempted+" Slurm began preempting job 7 (QOS low)")
}

func evictions(f *coreFixture) []*policyv1.Eviction {
	var out []*policyv1.Eviction
	for _, a := range f.kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetSubresource() == "eviction" {
			if e, ok := c.GetObject().(*policyv1.Eviction); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// A PodDisruptionBudget refuses the eviction: the pod is deleted anyway,
// and first given the DisruptionTarget condition the eviction API would
// have added, so that a Job's podFailurePolicy can ignore it.
func TestBudgetOverrideMarksTheDisruption(t *testing.T) {
	f := newCoreFixture(t)
	f.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "budget"}}
		return true, nil, err
	})
	cause := evictionCause(7, &slurmrest.Job{ID: 7, State: slurmrest.JobState{"PREEMPTED"}}, false)
	require.NoError(t, f.core.life.evictOrDelete(context.Background(), f.pod, cause, nil))

	var order []string
	for _, a := range f.kube.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetSubresource() == "status":
			order = append(order, "mark")
		case a.GetVerb() == "delete" && a.GetResource().Resource == "pods":
			order = append(order, "delete")
		}
	}
	assert.Equal(t, []string{"mark", "delete"}, order, "the condition first, then the delete")
	// What the patch writes (the fake deletes the pod at once).
	for _, a := range f.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" {
			var body struct {
				Status corev1.PodStatus `json:"status"`
			}
			require.NoError(t, json.Unmarshal(p.GetPatch(), &body))
			require.Len(t, body.Status.Conditions, 1)
			c := body.Status.Conditions[0]
			assert.Equal(t, corev1.DisruptionTarget, c.Type)
			assert.Equal(t, corev1.ConditionTrue, c.Status)
			assert.Equal(t, corev1.PodReasonPreemptionByScheduler, c.Reason)
			assert.Contains(t, c.Message, "Slurm job 7 ended (PREEMPTED)")
			assert.Equal(t, types.StrategicMergePatchType, p.GetPatchType())
		}
	}
}
