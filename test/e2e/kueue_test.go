package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// Kueue's objects, read and written as unstructured (onepool does not
// depend on Kueue's module).
var (
	kueueFlavors      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	kueueClusterQueue = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	kueueLocalQueues  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	kueueWorkloads    = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// Kueue admits, onepool places (issue 36 item 4; the lab runs Kueue's real
// controller and webhooks): two Jobs in one LocalQueue whose ClusterQueue
// has quota for 8 GPUs each ask 8. Slurm has room for both; Kueue's quota
// lets one run. The first is admitted and its pod placed through Slurm
// (its own placeholder job); the second stays suspended by Kueue, with no
// pod and so no Slurm job, until the first completes and gives its quota
// back; then it is admitted and placed through Slurm in turn.
func TestKueueAdmitsOnepoolPlaces(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	if err := e.l.StartKueue(ctx); errors.Is(err, lab.ErrKueueNotBuilt) && os.Getenv("CI") != "true" {
		t.Skip(err)
	} else {
		require.NoError(t, err)
	}
	// Cleanups run last first: Kueue stops after its objects are gone
	// (their finalizers are its own).
	t.Cleanup(func() { assert.NoError(t, e.l.StopKueue(context.Background())) })
	cfg, err := e.l.RESTConfig()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)

	flavor, cq, lq := uniqueName("gpus"), uniqueName("team"), "queue"
	kueueCreate(t, dyn, kueueFlavors, "", map[string]any{"metadata": map[string]any{"name": flavor}})
	kueueCreate(t, dyn, kueueClusterQueue, "", map[string]any{
		"metadata": map[string]any{"name": cq},
		"spec": map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": e.ns}},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
				"flavors": []any{map[string]any{"name": flavor, "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": "8"},
					map[string]any{"name": "memory", "nominalQuota": "8Gi"},
					map[string]any{"name": "nvidia.com/gpu", "nominalQuota": "8"},
				}}},
			}},
		},
	})
	kueueCreate(t, dyn, kueueLocalQueues, e.ns, map[string]any{
		"metadata": map[string]any{"name": lq, "namespace": e.ns},
		"spec":     map[string]any{"clusterQueue": cq},
	})

	first := e.kueueJob(lq, "first", "30s")
	firstPod := e.jobPodRunning(first, 120*time.Second)
	firstJob := e.withJobID(firstPod).Annotations[keys.AnnotationJobID]

	second := e.kueueJob(lq, "second", "1s")
	eventually(t, 30*time.Second, "Kueue's webhook suspends the second Job and its Workload waits for quota", func() (bool, string) {
		j, err := e.kc.BatchV1().Jobs(e.ns).Get(ctx, second, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pending, why := kueueWorkloadPending(ctx, dyn, e.ns, j.UID)
		return j.Spec.Suspend != nil && *j.Spec.Suspend && pending, why
	})
	if pods := e.jobPods(second); len(pods) != 0 {
		t.Fatalf("the second Job has pods while Kueue holds it: %s", replicaStates(pods))
	}
	if js := e.activeJobs(""); len(js) > 1 {
		t.Errorf("Slurm holds %d live onepool jobs, want the first Job's only (%s)", len(js), jobIDs(js))
	}

	secondPod := e.jobPodRunning(second, 120*time.Second)
	secondJob := e.withJobID(secondPod).Annotations[keys.AnnotationJobID]
	assert.NotEqual(t, firstJob, secondJob, "each admitted Job's pod has a Slurm job of its own")
	for _, j := range []string{first, second} {
		eventually(t, 60*time.Second, "Job "+j+" completes", func() (bool, string) {
			job, err := e.kc.BatchV1().Jobs(e.ns).Get(ctx, j, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return job.Status.Succeeded == 1, fmt.Sprintf("active %d, failed %d", job.Status.Active, job.Status.Failed)
		})
	}
}

// kueueCreate makes one of Kueue's objects and deletes it at cleanup,
// waiting until it is gone (Kueue removes its finalizer).
func kueueCreate(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, obj map[string]any) {
	t.Helper()
	obj["apiVersion"] = gvr.GroupVersion().String()
	obj["kind"] = map[string]string{"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue"}[gvr.Resource]
	u := &unstructured.Unstructured{Object: obj}
	c := dyn.Resource(gvr).Namespace(ns)
	_, err := c.Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err, "create %s %s", gvr.Resource, u.GetName())
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", gvr.Resource, u.GetName(), err)
			return
		}
		eventually(t, 60*time.Second, gvr.Resource+" "+u.GetName()+" gone", func() (bool, string) {
			_, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
}

// kueueWorkloadPending says whether the Workload of the Job with uid waits
// for quota: it exists and has no QuotaReserved condition that is true.
func kueueWorkloadPending(ctx context.Context, dyn dynamic.Interface, ns string, uid any) (bool, string) {
	l, err := dyn.Resource(kueueWorkloads).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, w := range l.Items {
		owned := false
		for _, o := range w.GetOwnerReferences() {
			owned = owned || o.UID == uid
		}
		if !owned {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "QuotaReserved" && m["status"] == "True" {
				return false, "workload " + w.GetName() + " has quota"
			}
		}
		return true, fmt.Sprint("workload ", w.GetName(), " conditions ", conds)
	}
	return false, fmt.Sprintf("no Workload of %d owns the Job", len(l.Items))
}

// kueueJob makes a Job of one 8-GPU pod in LocalQueue queue, which kwok
// completes after its pod has run for runFor; it returns its name. The
// Job is made unsuspended: Kueue's webhook suspends it.
func (e *schedEnv) kueueJob(queue, name, runFor string) string {
	e.t.Helper()
	tmpl := e.pod("", 8, nil)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": queue}},
		Spec: batchv1.JobSpec{
			Parallelism: ptrTo(int32(1)), Completions: ptrTo(int32(1)), BackoffLimit: ptrTo(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{kwokCompleteDelay: runFor}},
				Spec:       tmpl.Spec,
			},
		},
	}
	if _, err := e.kc.BatchV1().Jobs(e.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = e.kc.BatchV1().Jobs(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	return name
}

// jobPods lists the pods of Job name.
func (e *schedEnv) jobPods(name string) []corev1.Pod {
	e.t.Helper()
	l, err := e.kc.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

// jobPodRunning waits until Job name's pod runs on a node, and returns its
// name.
func (e *schedEnv) jobPodRunning(name string, timeout time.Duration) string {
	e.t.Helper()
	pod := ""
	eventually(e.t, timeout, "Job "+name+"'s pod runs on a node", func() (bool, string) {
		pods := e.jobPods(name)
		for _, p := range pods {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				pod = p.Name
				return true, ""
			}
		}
		return false, replicaStates(pods)
	})
	return pod
}
