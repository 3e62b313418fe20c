package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// Workload tests: Deployments and Jobs whose pods kube-controller-manager
// creates (the lab runs its deployment, replicaset, job and disruption
// controllers), placed by onepool through Slurm. They run in a schedEnv
// namespace and use its pod template.

// deployment is an inference Deployment of one-GPU replicas.
func (e *schedEnv) deployment(name string, replicas int32) *appsv1.Deployment {
	tmpl := e.pod("", 1, nil)
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptrTo(intstr.FromInt32(1)), MaxUnavailable: ptrTo(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func (e *schedEnv) createDeployment(d *appsv1.Deployment) {
	e.t.Helper()
	if _, err := e.kc.AppsV1().Deployments(e.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// The namespace's cleanup deletes pods; the Deployment would make more.
	e.t.Cleanup(func() {
		zero := int64(0)
		_ = e.kc.AppsV1().Deployments(e.ns).Delete(context.Background(), d.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

func (e *schedEnv) scale(name string, replicas int32) {
	e.t.Helper()
	// A patch of the scale: the Deployment controller writes its status
	// meanwhile, so a read-modify-write of the scale may conflict.
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := e.kc.AppsV1().Deployments(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale"); err != nil {
		e.t.Fatal(err)
	}
}

// replicas lists the live (not deleting) pods labelled app=name.
func (e *schedEnv) replicas(name string) []corev1.Pod {
	e.t.Helper()
	list, err := e.kc.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	out := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// runningBound splits replicas into those Running on a node and the others.
func runningBound(pods []corev1.Pod) (running, waiting []corev1.Pod) {
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		} else {
			waiting = append(waiting, p)
		}
	}
	return running, waiting
}

// waitReplicas waits until name has want Running replicas and pending
// unbound ones, and returns them.
func (e *schedEnv) waitReplicas(name string, want, pending int, timeout time.Duration) (running, waiting []corev1.Pod) {
	e.t.Helper()
	eventually(e.t, timeout, fmt.Sprintf("%s: %d replicas Running, %d pending", name, want, pending), func() (bool, string) {
		running, waiting = runningBound(e.replicas(name))
		unbound := 0
		for _, p := range waiting {
			if p.Spec.NodeName == "" {
				unbound++
			}
		}
		return len(running) == want && unbound == pending && len(waiting) == pending,
			fmt.Sprintf("%d running, %d waiting (%d unbound)", len(running), len(waiting), unbound)
	})
	return running, waiting
}

// checkOnTheirJobsNodes: each Running replica names its placeholder job,
// and Slurm runs that job on the replica's node.
func (e *schedEnv) checkOnTheirJobsNodes(pods []corev1.Pod) {
	e.t.Helper()
	for _, p := range pods {
		j := e.onlyJob(p.Name)
		if j.State.Base() != slurmrest.JobRunning || j.Nodes != p.Spec.NodeName {
			e.t.Errorf("replica %s on %s: its job %d is %v on %q", p.Name, p.Spec.NodeName, j.ID, j.State, j.Nodes)
		}
	}
}

// gpusInUse sums the GPUs Slurm has allocated on the lab's GPU nodes.
func (e *schedEnv) gpusInUse() int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := e.sc.ListNodes(ctx, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	total := 0
	for _, n := range list.Nodes {
		if !slices.Contains(e.l.NodeNames(), n.Name) {
			continue
		}
		total += lab.GresUsedCount(n.GresUsed)
	}
	return total
}

// holdGPUs submits a job array of n one-GPU sleep jobs in qos ("" for the
// default), named after the test's namespace (see noGPUTwice), and
// cancels it at cleanup.
func (e *schedEnv) holdGPUs(n int, qos string) string {
	e.t.Helper()
	args := []string{"sbatch", "--parsable", "-J", "hold-" + e.ns, "-p", lab.Partition, "--gres=gpu:1", "-o", "/dev/null",
		fmt.Sprintf("--array=0-%d", n-1)}
	if qos != "" {
		args = append(args, "--qos="+qos)
	}
	id := strings.TrimSpace(e.slurm(append(args, "--wrap", "sleep 600")...))
	e.t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", id) })
	return id
}

// runningTasks counts the RUNNING tasks of a job array (or job).
func (e *schedEnv) runningTasks(id string) int {
	out := e.slurm("squeue", "-h", "-r", "-j", id, "-t", "RUNNING", "-o", "%i")
	return len(strings.Fields(out))
}
