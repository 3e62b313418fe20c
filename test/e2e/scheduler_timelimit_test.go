package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// A replica (a Deployment's pod) whose job gets a time limit it did not
// ask for, its partition's MaxTime, is told so when it is placed: Slurm
// ends the job then and the replica is evicted. A bare pod in the same
// partition, and a replica that asks for its limit, are not.
func TestSchedulerWarnsAReplicaOfThePartitionsTimeLimit(t *testing.T) {
	l := lab.Shared(t)
	const part = "e2e-short"
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		out, err := l.Slurm(ctx, args...)
		return string(out), err
	}
	_, _ = run("scontrol", "delete", "PartitionName="+part) // a run cut off before its cleanup
	if out, err := run("scontrol", "create", "PartitionName="+part, "Nodes="+strings.Join(l.NodeNames(), ","), "MaxTime=04:00:00", "State=UP"); err != nil {
		t.Fatalf("scontrol create partition: %v %s", err, out)
	}
	// Registered before the namespace's cleanup, so it runs after it: the
	// partition goes once its jobs have.
	t.Cleanup(func() {
		_, _ = run("scancel", "-p", part)
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := run("scontrol", "delete", "PartitionName="+part)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("scontrol delete partition %s: %v %s", part, err, out)
				}
				return
			}
			time.Sleep(time.Second)
		}
	})
	e := newSchedEnv(t)
	inPart := map[string]string{keys.AnnotationJobPartition: part}

	e.create(e.pod("bare", 1, inPart))
	e.waitBound("bare", 60*time.Second)
	if tl := scontrolJob(t, e.l, e.onlyJob("bare").ID)["TimeLimit"]; tl != "04:00:00" {
		t.Fatalf("the bare pod's job: TimeLimit=%s, want the partition's 04:00:00", tl)
	}

	asks := e.deployment("asks", 1)
	asks.Spec.Template.Annotations = map[string]string{keys.AnnotationJobPartition: part, keys.AnnotationJobTimeLimit: "2h"}
	e.createDeployment(asks)
	web := e.deployment("web", 1)
	web.Spec.Template.Annotations = inPart
	e.createDeployment(web)
	running, _ := e.waitReplicas("asks", 1, 0, 90*time.Second)
	asker := running[0].Name
	running, _ = e.waitReplicas("web", 1, 0, 90*time.Second)
	replica := running[0].Name
	eventually(t, 30*time.Second, "a SlurmTimeLimit warning on "+replica, func() (bool, string) {
		return e.hasEvent(replica, keys.EventTimeLimit, "after its time limit 4h0m0s, which the pod did not ask for; this replica of ReplicaSet web-")
	})
	// Both replicas were bound before web's, and events of one pod's bind
	// are recorded in turn: by now theirs would be there.
	for _, name := range []string{"bare", asker} {
		if ok, _ := e.hasEvent(name, keys.EventTimeLimit, ""); ok {
			t.Errorf("pod %s got a %s warning: a bare pod, or one that asked for its limit, must not", name, keys.EventTimeLimit)
		}
	}
}
