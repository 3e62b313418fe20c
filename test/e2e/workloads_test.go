package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// The lab's pool: 4 GPU nodes of 8 GPUs.
const labPoolGPUs = 32

// An inference Deployment of one-GPU replicas: each replica is a
// placeholder job and runs where Slurm put it; scaled beyond what Slurm's
// other jobs leave, the extra replicas wait with Slurm's reason; scaled
// down, the removed replicas' jobs end and Slurm shows their GPUs free.
func TestWorkloadDeploymentScalesThroughSlurm(t *testing.T) {
	e := newSchedEnv(t)
	e.createDeployment(e.deployment("infer", 4))
	running, _ := e.waitReplicas("infer", 4, 0, 90*time.Second)
	e.checkOnTheirJobsNodes(running)
	if n := len(e.activeJobs("")); n != 4 {
		t.Errorf("%d active placeholder jobs for 4 replicas, want 4", n)
	}

	// Slurm jobs take 24 of the 28 free GPUs.
	hold := e.holdGPUs(labPoolGPUs-4-4, "")
	eventually(t, 60*time.Second, "the Slurm jobs run", func() (bool, string) {
		n := e.runningTasks(hold)
		return n == labPoolGPUs-8, fmt.Sprintf("%d running", n)
	})
	e.scale("infer", 12)
	running, waiting := e.waitReplicas("infer", 8, 4, 90*time.Second)
	e.checkOnTheirJobsNodes(running)
	for _, p := range waiting {
		msg := e.waitPendingWith(p.Name, "PENDING (", 30*time.Second)
		j := e.onlyJob(p.Name)
		if !strings.Contains(msg, fmt.Sprintf("job %d", j.ID)) {
			t.Errorf("pending replica %s: message %q does not name its job %d", p.Name, msg, j.ID)
		}
	}
	if used := e.gpusInUse(); used != labPoolGPUs {
		t.Errorf("Slurm shows %d GPUs in use, want all %d (24 by Slurm jobs, 8 by replicas)", used, labPoolGPUs)
	}

	e.scale("infer", 2)
	eventually(t, 90*time.Second, "2 replicas left, their jobs alone active, the rest of the GPUs free", func() (bool, string) {
		live := e.replicas("infer")
		active := e.activeJobs("")
		used := e.gpusInUse()
		return len(live) == 2 && len(active) == 2 && used == labPoolGPUs-8+2,
			fmt.Sprintf("%d replicas, active jobs %v, %d GPUs in use", len(live), jobIDs(active), used)
	})
	running, _ = runningBound(e.replicas("infer"))
	e.checkOnTheirJobsNodes(running)
}

// A training job in the high QOS needs every GPU the replicas hold: Slurm
// preempts their placeholders, each replica is evicted with an event
// naming Slurm, the Deployment makes new replicas, they wait in Slurm's
// queue while the training runs (none bound to a node meanwhile), and run
// again when it ends.
func TestWorkloadTrainingPreemptsReplicasThenTheyReturn(t *testing.T) {
	e := newSchedEnv(t)
	e.createDeployment(e.deployment("serve", 4))
	old, _ := e.waitReplicas("serve", 4, 0, 90*time.Second)
	train := strings.TrimSpace(e.slurm("sbatch", "--parsable", "-J", uniqueName("train"), "-p", lab.Partition, "--qos=high",
		fmt.Sprintf("--nodes=%d", len(e.l.NodeNames())), "--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600"))
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", train) })

	trainRunning := func() bool { return e.runningTasks(train) == 1 }
	eventually(t, 90*time.Second, "the training job runs", func() (bool, string) {
		return trainRunning(), fmt.Sprintf("replicas: %s", replicaStates(e.replicas("serve")))
	})
	for _, p := range old {
		if ok, seen := e.eventSoon(p.Name, keys.EventJobPreempted, "Slurm began preempting job"); !ok {
			t.Errorf("replica %s: no %s event; events: %s", p.Name, keys.EventJobPreempted, seen)
		}
	}
	// The replacements wait in Slurm's queue, bound nowhere, while it runs.
	_, waiting := e.waitReplicas("serve", 0, 4, 60*time.Second)
	for _, p := range waiting {
		if slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID }) {
			t.Errorf("replica %s outlived the preemption of its job", p.Name)
		}
		e.waitPendingWith(p.Name, "PENDING (", 30*time.Second)
	}
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		for _, p := range e.replicas("serve") {
			if p.Spec.NodeName != "" && trainRunning() {
				t.Fatalf("replica %s bound to %s while the training job holds every GPU", p.Name, p.Spec.NodeName)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.slurm("scancel", train)
	running, _ := e.waitReplicas("serve", 4, 0, 90*time.Second)
	e.checkOnTheirJobsNodes(running)
}

// A rolling update (maxSurge 1, maxUnavailable 0) while Slurm's jobs fill
// the pool: the surge replica waits in Slurm's queue and the old ones keep
// running; once one GPU frees, the rollout completes replica by replica.
// At no point does a GPU index serve two jobs.
func TestWorkloadRollingUpdateWaitsForSlurm(t *testing.T) {
	e := newSchedEnv(t)
	d := e.deployment("roll", 4)
	e.createDeployment(d)
	e.waitReplicas("roll", 4, 0, 90*time.Second)
	hold := e.holdGPUs(labPoolGPUs-4, "")
	eventually(t, 60*time.Second, "the Slurm jobs fill the pool", func() (bool, string) {
		n := e.runningTasks(hold)
		return n == labPoolGPUs-4, fmt.Sprintf("%d running", n)
	})

	ctx := context.Background()
	cur, err := e.kc.AppsV1().Deployments(e.ns).Get(ctx, "roll", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Annotations = map[string]string{"e2e/version": "2"}
	if _, err := e.kc.AppsV1().Deployments(e.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, waiting := e.waitReplicas("roll", 4, 1, 60*time.Second)
	e.waitPendingWith(waiting[0].Name, "PENDING (", 30*time.Second)
	for _, p := range running {
		if p.Annotations["e2e/version"] != "" {
			t.Errorf("a new replica %s runs while the pool is full", p.Name)
		}
	}
	e.noGPUTwice()

	e.slurm("scancel", hold+"_0")
	eventually(t, 120*time.Second, "the rollout completes", func() (bool, string) {
		e.noGPUTwice()
		running, waiting := runningBound(e.replicas("roll"))
		updated := 0
		for _, p := range running {
			if p.Annotations["e2e/version"] == "2" {
				updated++
			}
		}
		return updated == 4 && len(running) == 4 && len(waiting) == 0, fmt.Sprintf("%d of %d running replicas updated, %d waiting", updated, len(running), len(waiting))
	})
	running, _ = runningBound(e.replicas("roll"))
	e.checkOnTheirJobsNodes(running)
}

// noGPUTwice fails the test if a GPU index is held by two running jobs on
// one node, among the namespace's placeholders and its holdGPUs jobs.
func (e *schedEnv) noGPUTwice() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := e.sc.ListJobs(ctx, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	held := map[string]uint32{}
	for _, j := range list.Jobs {
		ours := strings.HasPrefix(j.Comment, "onepool:pod="+e.ns+"/") || j.Name == "hold-"+e.ns
		if !ours || j.State.Base() != slurmrest.JobRunning {
			continue
		}
		for node := range j.GresDetail {
			idx, err := j.GPUIndexes(node)
			if err != nil {
				e.t.Fatalf("job %d on %s: %v", j.ID, node, err)
			}
			for _, i := range idx {
				k := fmt.Sprintf("%s/%d", node, i)
				if other, ok := held[k]; ok {
					e.t.Fatalf("GPU %s held by jobs %d and %d", k, other, j.ID)
				}
				held[k] = j.ID
			}
		}
	}
}

// Batch inference as an indexed Job (parallelism 4, completions 8): it
// completes, each pod had one placeholder job, and every placeholder
// ended with its pod.
func TestWorkloadIndexedJobCompletes(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	tmpl := e.pod("", 1, nil)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "batch-infer", Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: ptrTo(int32(4)), Completions: ptrTo(int32(8)), CompletionMode: ptrTo(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec},
		},
	}
	if _, err := e.kc.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = e.kc.BatchV1().Jobs(e.ns).Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	eventually(t, 180*time.Second, "the Job completes", func() (bool, string) {
		j, err := e.kc.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("succeeded %d, active %d, failed %d", j.Status.Succeeded, j.Status.Active, j.Status.Failed)
	})
	pods, err := e.kc.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		succeeded++
		if js := slices.DeleteFunc(e.jobs(p.Name), refusedAllocation); len(js) != 1 {
			t.Errorf("pod %s: %d placeholder jobs %v, want 1", p.Name, len(js), jobIDs(js))
		}
	}
	if succeeded != 8 {
		t.Errorf("%d pods Succeeded, want 8", succeeded)
	}
	eventually(t, 60*time.Second, "every placeholder job ended with its pod", func() (bool, string) {
		active := e.activeJobs("")
		return len(active) == 0, fmt.Sprintf("active: %v", jobIDs(active))
	})
}

// A PodDisruptionBudget that allows no disruption does not keep a replica
// on GPUs Slurm took back: Slurm preempts its job for a high-QOS job, the
// eviction is refused, and the pod is deleted anyway with an event saying
// so; the high job then runs.
func TestWorkloadPreemptionOverridesADisruptionBudget(t *testing.T) {
	e := newSchedEnv(t)
	e.createDeployment(e.deployment("guarded", 2))
	old, _ := e.waitReplicas("guarded", 2, 0, 90*time.Second)
	ctx := context.Background()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: e.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	if _, err := e.kc.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the disruption controller says no disruption is allowed", func() (bool, string) {
		p, err := e.kc.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 2 && p.Status.DisruptionsAllowed == 0,
			fmt.Sprintf("%+v", p.Status)
	})
	victim := old[0]
	// A Job's podFailurePolicy reads DisruptionTarget: the deleted replica
	// must carry it, as an evicted one would.
	w, err := e.kc.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + victim.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	marked := make(chan corev1.PodCondition, 1)
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
					select {
					case marked <- c:
					default:
					}
				}
			}
		}
	}()
	high := e.submitQOSOn(uniqueName("high"), "high", victim.Spec.NodeName)
	eventually(t, 60*time.Second, "the replica on "+victim.Spec.NodeName+" is gone", func() (bool, string) {
		p, err := e.get(victim.Name)
		return err != nil, fmt.Sprintf("%v", podPhase(p))
	})
	if ok, seen := e.eventSoon(victim.Name, keys.EventBudgetOverridden, "Slurm has already decided"); !ok {
		t.Errorf("replica %s: no %s event; events: %s", victim.Name, keys.EventBudgetOverridden, seen)
	}
	select {
	case c := <-marked:
		if c.Reason != corev1.PodReasonPreemptionByScheduler || !strings.Contains(c.Message, "Slurm") {
			t.Errorf("replica %s's DisruptionTarget: %s %q", victim.Name, c.Reason, c.Message)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("replica %s was deleted without the DisruptionTarget condition", victim.Name)
	}
	eventually(t, 60*time.Second, "the high-QOS job runs", func() (bool, string) {
		j := e.jobNow(high)
		return j.State.Base() == slurmrest.JobRunning, fmt.Sprintf("%v %s", j.State, j.Reason)
	})
}

// submitQOSOn is submitQOS on one node.
func (e *schedEnv) submitQOSOn(name, qos, node string) uint32 {
	e.t.Helper()
	out := strings.TrimSpace(e.slurm("sbatch", "--parsable", "-J", name, "-p", lab.Partition, "--qos="+qos, "-w", node,
		"--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 600"))
	id, err := strconv.ParseUint(out, 10, 32)
	if err != nil {
		e.t.Fatalf("sbatch %s: %q", name, out)
	}
	e.t.Cleanup(func() { _ = e.sc.CancelJob(context.Background(), uint32(id)) })
	return uint32(id)
}

func podPhase(p *corev1.Pod) string {
	if p == nil {
		return "gone"
	}
	return fmt.Sprintf("%s on %q deleting=%v", p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
}

func replicaStates(ps []corev1.Pod) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name+"="+podPhase(&p))
	}
	return strings.Join(s, " ")
}
