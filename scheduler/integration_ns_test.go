package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// nsEnv is one subtest's namespace, TenantPolicy and nodes.
type nsEnv struct {
	*itEnv
	t     *testing.T
	ns    string
	nodes []string
}

// namespace makes a namespace of its own for a subtest, the TenantPolicy
// that covers it (spec, its namespaces set) and n GPU nodes whose names are
// their Slurm nodes' names.
func (s *itEnv) namespace(t *testing.T, name string, spec v1alpha1.TenantPolicySpec, n int) *nsEnv {
	t.Helper()
	ctx := context.Background()
	e := &nsEnv{itEnv: s, t: t, ns: fmt.Sprintf("it-%s-%d", name, time.Now().UnixNano()%1e6)}
	_, err := s.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	spec.Namespaces = v1alpha1.NamespaceSelector{Names: []string{e.ns}}
	policy := &v1alpha1.TenantPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TenantPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: e.ns},
		Spec:       spec,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	require.NoError(t, err)
	_, err = s.dyn.Resource(v1alpha1.Resource).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = s.dyn.Resource(v1alpha1.Resource).Delete(context.Background(), e.ns, metav1.DeleteOptions{})
	})
	for i := range n {
		e.nodes = append(e.nodes, fmt.Sprintf("%s-gpu%d", e.ns, i))
		e.createNode(e.nodes[i], nil)
	}
	return e
}

func (e *nsEnv) node(i int) string { return e.nodes[i] }

// createNode makes a Node with 8 GPUs (no kubelet: it only takes pods).
func (e *nsEnv) createNode(name string, labels map[string]string) {
	e.t.Helper()
	room := corev1.ResourceList{
		ResourceGPU: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Capacity: room, Allocatable: room},
	}
	ctx := context.Background()
	got, err := e.kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	require.NoError(e.t, err)
	e.slurm.does().addNode(slurmnode.Of(got))
	e.t.Cleanup(func() { _ = e.kc.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The API server taints a new Node not-ready (TaintNodesByCondition);
	// no node lifecycle controller runs here to lift it.
	got.Spec.Taints = nil
	_, err = e.kc.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// cordon marks a node unschedulable, as kubectl cordon does.
func (e *nsEnv) cordon(name string) {
	e.t.Helper()
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	_, err := e.kc.CoreV1().Nodes().Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(e.t, err)
}

// createPod makes a onepool pod asking gpus nvidia.com/gpu (cpu and memory
// requests when set) with a 60 s termination grace.
func (e *nsEnv) createPod(name string, gpus int64, cpu, mem string, ann, labels map[string]string) *corev1.Pod {
	e.t.Helper()
	pod := podWith(ann, gpus, cpu, mem)
	pod.Name, pod.Namespace, pod.UID, pod.Labels = name, e.ns, "", labels
	pod.Spec.SchedulerName = keys.SchedulerName
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	pod.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
	got, err := e.kc.CoreV1().Pods(e.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return got
}

// createPodGroup makes a PodGroup of minMember pods.
func (e *nsEnv) createPodGroup(name string, minMember int64) *unstructured.Unstructured {
	e.t.Helper()
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": PodGroupGVR.GroupVersion().String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"spec":     map[string]any{"minMember": minMember},
	}}
	got, err := e.dyn.Resource(PodGroupGVR).Namespace(e.ns).Create(context.Background(), pg, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return got
}

func (e *nsEnv) get(name string) *corev1.Pod {
	p, err := e.kc.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

func (e *nsEnv) eventually(what string, cond func() (bool, string)) {
	e.t.Helper()
	testenv.Eventually(e.t, 30*time.Second, what, cond)
}

// submitted waits for the one batch submission of the job named
// onepool/<ns>/<name> and returns it.
func (e *nsEnv) submitted(name string) slurmAsk {
	e.t.Helper()
	job := "onepool/" + e.ns + "/" + name
	e.eventually("a placeholder job is submitted for "+name, func() (bool, string) {
		return len(e.slurm.asked().submitsFor(job)) > 0, fmt.Sprintf("%+v", e.slurm.asked().asksFor(job))
	})
	asks := e.slurm.asked().submitsFor(job)
	require.Len(e.t, asks, 1, "one placeholder job for %s", name)
	return asks[0]
}

// bound waits until the API server shows the pod bound, and returns its
// node.
func (e *nsEnv) bound(name string) string {
	e.t.Helper()
	var node string
	e.eventually(name+" is bound", func() (bool, string) {
		p := e.get(name)
		if p == nil {
			return false, "no pod"
		}
		node = p.Spec.NodeName
		return node != "", podScheduled(p)
	})
	return node
}

// unschedulable waits until the pod's PodScheduled condition (what kubectl
// describe shows) says text.
func (e *nsEnv) unschedulable(name, text string) {
	e.t.Helper()
	e.eventually(name+" is unschedulable saying "+text, func() (bool, string) {
		p := e.get(name)
		if p == nil {
			return false, "no pod"
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, text) {
				return p.Spec.NodeName == "", ""
			}
		}
		return false, podScheduled(p)
	})
}

func podScheduled(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no PodScheduled condition"
}

// event waits for an event on the pod with reason whose message holds text.
func (e *nsEnv) event(name, reason, text string) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s gets a %s event saying %q", name, reason, text), func() (bool, string) {
		return testenv.HasEvent(e.kc, e.ns, name, reason, text)
	})
}

// terminating waits until the pod is being deleted (evicted), and returns
// it.
func (e *nsEnv) terminating(name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	e.eventually(name+" is evicted", func() (bool, string) {
		pod = e.get(name)
		return pod != nil && pod.DeletionTimestamp != nil, fmt.Sprint(pod != nil)
	})
	return pod
}

// forceDelete removes the pod at once, as the kubelet does once it stopped.
func (e *nsEnv) forceDelete(name string) {
	e.t.Helper()
	err := e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if !apierrors.IsNotFound(err) {
		require.NoError(e.t, err)
	}
}
