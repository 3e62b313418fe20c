package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// An idle cluster: Slurm grants the pod's job inside the request (an
// allocation, no batch script). Slurm then ends it (scancel) while the pod
// cannot go yet (a finalizer holds it, as a slow shutdown would): the
// node stays COMPLETING under onepool's release epilog, and a Slurm job
// that needs those GPUs waits until the pod is gone, then runs.
func TestSchedulerAllocationAtOnceHoldsGPUsUntilThePodIsGone(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	const hold = "onepool.dev/e2e-hold"
	release := func(name string) {
		_, _ = e.kc.CoreV1().Pods(e.ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
	// The scheduler asks for no allocation for a while after Slurm refused
	// one in the partition (an earlier test may have filled it): a pod
	// queued instead is let go and the next one tried.
	var p *corev1.Pod
	var node string
	var job slurmrest.Job
	for try := 0; ; try++ {
		p = e.pod(fmt.Sprintf("at-once-%d", try), int64(lab.GPUsPerNode), nil)
		p.Finalizers = []string{hold}
		e.create(p)
		t.Cleanup(func() { release(p.Name) })
		node = e.waitBound(p.Name, 30*time.Second)
		job = e.onlyJob(p.Name)
		if ok, _ := e.hasEvent(p.Name, keys.EventJobSubmitted, "at once"); ok {
			break
		}
		_, events := e.hasEvent(p.Name, keys.EventJobSubmitted, "at once")
		require.Less(t, try, 2, "Slurm never granted an allocation at once on an idle node; events: %s", events)
		release(p.Name)
		require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		e.waitGone(p.Name, 30*time.Second)
		time.Sleep(11 * time.Second)
	}
	sc := scontrolJob(t, e.l, job.ID)
	assert.Equal(t, "0", sc["BatchFlag"], "the pod's job is an allocation, not a batch job")

	// Slurm ends the job: the pod is evicted, but cannot go yet.
	require.NoError(t, e.sc.CancelJob(ctx, job.ID))
	eventually(t, 20*time.Second, "the pod is evicted", func() (bool, string) {
		got, err := e.get(p.Name)
		if err != nil {
			return false, err.Error()
		}
		return got.DeletionTimestamp != nil, "no deletionTimestamp"
	})
	next := mustSbatch(t, e.l, "-p", lab.Partition, "-w", node, fmt.Sprintf("--gres=gpu:%d", lab.GPUsPerNode), "-J", uniqueName("after"),
		"-o", "/dev/null", "--wrap", "sleep 600")
	t.Cleanup(func() { _ = e.sc.CancelJob(context.Background(), next) })
	// While the pod lives, its GPUs stay with the ended job.
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		j := scontrolJob(t, e.l, next)
		require.Equal(t, "PENDING", j["JobState"], "a job got the GPUs of a pod still on them")
		time.Sleep(500 * time.Millisecond)
	}
	held := scontrolJob(t, e.l, job.ID)
	assert.Equal(t, "COMPLETING", held["JobState"], "the cancelled allocation completes only once its pod is gone")
	assert.True(t, strings.Contains(strings.ToUpper(scontrolNode(t, e.l, node)["State"]), "COMPLETING"),
		"node %s: State=%s; want COMPLETING while the epilog waits", node, scontrolNode(t, e.l, node)["State"])

	release(p.Name)
	e.waitGone(p.Name, 20*time.Second)
	waitJobRunningOn(t, e.l, next, node, 30*time.Second)
}

// Pods deleted while their first ask to Slurm may be in flight (0 to 90 ms
// after create, when an allocation is granted in about 20 ms): whatever
// Slurm granted for them ends at once, and no job is left running for a
// pod that is gone.
func TestSchedulerPodDeletedWhileItsJobIsAskedLeavesNoJob(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	zero := int64(0)
	var names []string
	for i, delay := range []time.Duration{0, 5, 10, 15, 20, 30, 45, 60, 90} {
		name := fmt.Sprintf("gone-%d", i)
		names = append(names, name)
		e.create(e.pod(name, 2, nil))
		time.Sleep(delay * time.Millisecond)
		require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}
	// A job left behind would hold GPUs the next tests need: whatever
	// this test finds, nothing of it outlives it.
	t.Cleanup(func() {
		for _, name := range names {
			for _, j := range e.activeJobs(name) {
				_ = e.sc.CancelJob(context.Background(), j.ID)
			}
		}
	})
	withJob := 0
	for _, name := range names {
		if len(e.jobs(name)) > 0 {
			withJob++
		}
		eventually(t, 30*time.Second, "no live job for deleted pod "+name, func() (bool, string) {
			js := e.activeJobs(name)
			return len(js) == 0, fmt.Sprint(jobIDs(js))
		})
	}
	t.Logf("%d of %d deleted pods had a job in Slurm; every one ended", withJob, len(names))
}

// Slurm begins preempting placeholders whose pods are already gone (the
// scheduler was down when they were deleted): once the scheduler is back
// it cancels them instead of waiting for Slurm's deadline, so the high
// job gets the GPUs before that deadline, and nothing is evicted twice or
// left running.
func TestSchedulerPreemptionOfAJobWhosePodIsGone(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	on := e.fillWithPods("pre-gone")
	jobOf := map[string]uint32{}
	for name := range on {
		jobOf[name] = e.onlyJob(name).ID
	}
	require.NoError(t, e.l.StopScheduler())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			require.NoError(t, e.l.StartScheduler(context.Background()))
		}
	})
	zero := int64(0)
	for name := range on {
		require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	}
	high := e.submitQOS(uniqueName("high"), "high")
	var victim *slurmrest.Job
	eventually(t, 60*time.Second, "Slurm begins preempting a placeholder", func() (bool, string) {
		for _, id := range jobOf {
			if j := e.jobNow(id); !j.PreemptTime.IsZero() {
				victim = j
				return true, ""
			}
		}
		return false, fmt.Sprintf("high job: %v %s", e.jobNow(high).State, e.jobNow(high).Reason)
	})
	require.Equal(t, slurmrest.JobRunning, victim.State.Base(), "the preempted placeholder runs through its GraceTime")
	require.NoError(t, e.l.StartScheduler(ctx))
	restarted = true
	var j *slurmrest.Job
	eventually(t, qosGrace, "the high-QOS job runs", func() (bool, string) {
		j = e.jobNow(high)
		return j.State.Base() == slurmrest.JobRunning, fmt.Sprintf("%v %s", j.State, j.Reason)
	})
	deadline := victim.PreemptTime.Add(qosGrace)
	t.Logf("job %d of a gone pod: preemption began %s; the high job %d started %s (Slurm's deadline %s)",
		victim.ID, victim.PreemptTime.Format(time.TimeOnly), high, j.StartTime.Format(time.TimeOnly), deadline.Format(time.TimeOnly))
	assert.True(t, j.StartTime.Before(deadline), "the high job started at %s, not before the gone pod's job's deadline %s", j.StartTime, deadline)
	for name, id := range jobOf {
		eventually(t, 30*time.Second, "job of gone pod "+name+" ends", func() (bool, string) {
			st := e.jobNow(id).State
			return st.Finished() && !st.Has("COMPLETING"), fmt.Sprint(st)
		})
	}
}
