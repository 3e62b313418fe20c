package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// fillWithPods binds one 8-GPU onepool pod to every lab node and returns
// pod name → node.
func (e *schedEnv) fillWithPods(prefix string) map[string]string {
	e.t.Helper()
	n := len(e.l.NodeNames())
	for i := range n {
		e.create(e.pod(fmt.Sprintf("%s-%d", prefix, i), 8, nil))
	}
	on := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		on[name] = e.waitBound(name, 30*time.Second)
	}
	return on
}

// submitQOS submits an 8-GPU sleep job in qos and cancels it at cleanup.
func (e *schedEnv) submitQOS(name, qos string) uint32 {
	e.t.Helper()
	j := sleepJob(name, 8)
	j.QOS = qos
	id, err := e.sc.SubmitJob(context.Background(), j)
	if err != nil {
		e.t.Fatalf("submit %s in QOS %s: %v", name, qos, err)
	}
	e.t.Cleanup(func() { _ = e.sc.CancelJob(context.Background(), id) })
	return id
}

func (e *schedEnv) jobNow(id uint32) *slurmrest.Job {
	e.t.Helper()
	j, err := e.sc.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// A high-QOS Slurm job needs the GPUs a placeholder holds: as soon as Slurm
// begins preempting the placeholder (preempt_time set, the job still
// RUNNING through GraceTime), its pod is evicted, with an event saying so;
// once the pod is gone the GPUs go to the high job, before Slurm's
// deadline. The other pods stay.
func TestSchedulerHighQOSJobPreemptsPlaceholder(t *testing.T) {
	e := newSchedEnv(t)
	on := e.fillWithPods("normal")
	jobOf := map[string]uint32{}
	for name := range on {
		jobOf[name] = e.onlyJob(name).ID
	}
	high := e.submitQOS(uniqueName("high"), "high")
	victim := ""
	eventually(t, 60*time.Second, "a placeholder pod is evicted", func() (bool, string) {
		for name := range on {
			if p, err := e.get(name); err != nil || p.DeletionTimestamp != nil {
				victim = name
				return true, ""
			}
		}
		return false, fmt.Sprintf("high job: %v", e.jobNow(high).State)
	})
	// Events are recorded in the background: the eviction may be seen first
	// (chart-mode CI did).
	eventually(t, 15*time.Second, victim+"'s "+keys.EventJobPreempted+" event", func() (bool, string) {
		return e.hasEvent(victim, keys.EventJobPreempted, "Slurm began preempting job")
	})
	placeholder := e.jobNow(jobOf[victim])
	if placeholder.PreemptTime.IsZero() {
		t.Fatalf("%s was evicted but Slurm did not preempt its job %d (%v %s)", victim, placeholder.ID, placeholder.State, placeholder.Reason)
	}
	var j *slurmrest.Job
	eventually(t, 60*time.Second, "the high-QOS job runs", func() (bool, string) {
		j = e.jobNow(high)
		return j.State.Base() == slurmrest.JobRunning, fmt.Sprintf("%v %s", j.State, j.Reason)
	})
	if j.Nodes != on[victim] {
		t.Errorf("the high job runs on %s; the evicted pod was on %s", j.Nodes, on[victim])
	}
	// Slurm's deadline: preempt_time + the normal QOS's GraceTime (EndTime
	// says so only until onepool cancels the job).
	if deadline := placeholder.PreemptTime.Add(qosGrace); !j.StartTime.Before(deadline) {
		t.Errorf("the high job started at %s, not before the placeholder's deadline %s: the GPUs were not given back once the pod was gone",
			j.StartTime, deadline)
	}
	for name := range on {
		if name == victim {
			continue
		}
		if p, err := e.get(name); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("%s was not preempted but is gone or going: %v", name, err)
		}
	}
}

func TestSchedulerHighQOSPodPreemptsSlurmJobs(t *testing.T) {
	e := newSchedEnv(t)
	var low []uint32
	for range e.l.NodeNames() {
		low = append(low, e.submitQOS(uniqueName("low"), "low"))
	}
	eventually(t, 60*time.Second, "the low-QOS jobs fill every node", func() (bool, string) {
		for _, id := range low {
			if j := e.jobNow(id); j.State.Base() != slurmrest.JobRunning {
				return false, fmt.Sprintf("job %d %v %s", id, j.State, j.Reason)
			}
		}
		return true, ""
	})
	e.create(e.pod("urgent", 8, map[string]string{keys.AnnotationJobQOS: "high"}))
	node := e.waitBound("urgent", 120*time.Second) // the low QOS's GraceTime, then the sweep
	preempted := 0
	for _, id := range low {
		j := e.jobNow(id)
		if j.State.Base() == "PREEMPTED" {
			preempted++
			if j.Nodes != node {
				t.Errorf("job %d was preempted on %s but the pod went to %s", id, j.Nodes, node)
			}
		}
	}
	if preempted != 1 {
		t.Errorf("%d low-QOS jobs preempted, want 1", preempted)
	}
	if q := scontrolJob(t, e.l, e.onlyJob("urgent").ID)["QOS"]; q != "high" {
		t.Errorf("the pod's job runs in QOS %q, want high", q)
	}
}
