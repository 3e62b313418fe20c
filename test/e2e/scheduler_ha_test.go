package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// Two scheduler replicas; the leader is SIGKILLed in the middle of a burst
// of 50 pods. The standby takes the lease over and finishes the burst: every
// pod bound once, to the node of its one Slurm job, no job without its pod,
// no pod evicted or deleted, and the killed replica, back as a standby, acts
// on nothing.
func TestSchedulerStandbyTakesOverMidBurst(t *testing.T) {
	if lab.ChartMode() {
		t.Skip("runs the lab's scheduler processes as replicas; with the chart, make bench-install kills the leader pod")
	}
	e := newSchedEnv(t)
	ctx := context.Background()
	if err := e.l.StartSchedulerReplica(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the lab's default: replica 0 alone. Stopping replica 1
		// hands the lease back, so replica 0 leads at once.
		if err := e.l.StartSchedulerReplica(ctx, 0); err != nil {
			t.Error(err)
		}
		if err := e.l.StopSchedulerReplica(1); err != nil {
			t.Error(err)
		}
	})
	var leader int
	eventually(t, 30*time.Second, "a scheduler replica holds the lease", func() (bool, string) {
		i, id, err := e.l.SchedulerLeader(ctx)
		if err != nil {
			return false, err.Error()
		}
		leader = i
		return true, id
	})
	standby := 1 - leader

	const n = 50
	names := make([]string, n)
	uids := make(map[string]types.UID, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				p, err := e.kc.CoreV1().Pods(e.ns).Create(ctx, e.pod(name, 0, nil), metav1.CreateOptions{})
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				uids[name] = p.UID
				mu.Unlock()
			}
		}()
	}
	for i := range names {
		names[i] = fmt.Sprintf("burst-%02d", i)
	}
	killed := time.Time{}
	for i, name := range names {
		work <- name
		if i == n/3 {
			// The leader is placing the first third when it dies.
			if err := e.l.KillSchedulerReplica(leader); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	eventually(t, 60*time.Second, "the standby holds the lease", func() (bool, string) {
		i, id, err := e.l.SchedulerLeader(ctx)
		if err != nil {
			return false, err.Error()
		}
		return i == standby, fmt.Sprintf("replica %d (%s)", i, id)
	})
	t.Logf("replica %d took over %v after replica %d was killed", standby, time.Since(killed).Round(100*time.Millisecond), leader)
	for _, name := range names {
		e.waitBound(name, 3*time.Minute)
	}
	// The killed replica comes back, as a Deployment would restart it: a
	// standby now.
	if err := e.l.StartSchedulerReplica(ctx, leader); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // cache polls and resyncs of both replicas: room for a wrong action to show

	pods, err := e.kc.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != n {
		t.Errorf("%d pods exist, want %d", len(pods.Items), n)
	}
	active := 0
	for _, j := range e.jobs("") {
		if !j.State.Finished() {
			active++
		}
	}
	for _, p := range pods.Items {
		if p.UID != uids[p.Name] || p.DeletionTimestamp != nil {
			t.Errorf("pod %s was replaced or is being deleted", p.Name)
		}
		js := e.jobs(p.Name)
		if len(js) != 1 {
			t.Errorf("pod %s: %d Slurm jobs %v, want exactly 1", p.Name, len(js), jobIDs(js))
			continue
		}
		j := js[0]
		if j.State.Finished() || p.Annotations[keys.AnnotationJobID] != fmt.Sprint(j.ID) {
			t.Errorf("pod %s (job annotation %q): its job is %d %v", p.Name, p.Annotations[keys.AnnotationJobID], j.ID, j.State)
		}
		if p.Spec.NodeName != j.Nodes {
			t.Errorf("pod %s bound to %q, its job %d runs on %q", p.Name, p.Spec.NodeName, j.ID, j.Nodes)
		}
		scheduled := 0
		evs, err := e.kc.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			switch {
			case ev.Reason == "Scheduled":
				scheduled += max(1, int(ev.Count))
			case ev.Type == corev1.EventTypeWarning && ev.Reason != "FailedScheduling":
				t.Errorf("pod %s: %s %s", p.Name, ev.Reason, ev.Message)
			}
		}
		if scheduled > 1 {
			t.Errorf("pod %s was bound %d times", p.Name, scheduled)
		}
	}
	if active != n {
		t.Errorf("%d active placeholder jobs for %d pods", active, n)
	}
}
