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
