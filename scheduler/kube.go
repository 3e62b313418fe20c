package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
)

var metav1GetOptions = metav1.GetOptions{}

func listByGroup(name string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: labels.Set{keys.LabelPodGroup: name}.String()}
}

// GroupReader reads a PodGroup.
type GroupReader interface {
	Group(ctx context.Context, namespace, name string) (Group, error)
}

// Group is what onepool reads of a PodGroup: its uid (named in the gang's
// placeholder comment) and how many pods one job places.
type Group struct {
	UID       types.UID
	MinMember int
}

// PodGroupGVR is scheduler-plugins' PodGroup (coscheduling).
var PodGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

// DynamicGroups reads PodGroups without importing scheduler-plugins' types.
type DynamicGroups struct{ Client dynamic.Interface }

func (g DynamicGroups) Group(ctx context.Context, namespace, name string) (Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := g.Client.Resource(PodGroupGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Group{}, fmt.Errorf("PodGroup %s/%s: %w", namespace, name, err)
	}
	n, err := minMemberOf(u)
	if err != nil {
		return Group{}, err
	}
	return Group{UID: u.GetUID(), MinMember: n}, nil
}

func minMemberOf(u *unstructured.Unstructured) (int, error) {
	n, found, err := unstructured.NestedInt64(u.Object, "spec", "minMember")
	if err != nil || !found || n < 1 || n > 4096 {
		return 0, fmt.Errorf("PodGroup %s/%s: spec.minMember must be 1 to 4096", u.GetNamespace(), u.GetName())
	}
	return int(n), nil
}

// evict asks the API server to evict a pod gracefully (its PodDisruptionBudgets
// apply; grace, when set, replaces its termination grace). The uid
// precondition keeps a replacement pod of the same name safe.
func evict(ctx context.Context, c interface {
	EvictV1(context.Context, *policyv1.Eviction) error
}, pod *corev1.Pod, grace *int64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	uid := pod.UID
	err := c.EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, GracePeriodSeconds: grace},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or replaced
	}
	return err
}

// markDisruption gives the pod the DisruptionTarget condition, as the
// eviction API does, before a delete that bypasses it: a Job's
// podFailurePolicy (onPodConditions: DisruptionTarget) then tells Slurm's
// decision from a failure of the pod's own.
func markDisruption(ctx context.Context, c interface {
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Pod, error)
}, pod *corev1.Pod, message string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler,
		Message: message, LastTransitionTime: metav1.Now()}
	// Conditions merge by type (a strategic merge patch of the status).
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// annotateJobID records the placeholder job on the pod for kubectl and for
// a restarted scheduler.
func annotateJobID(ctx context.Context, c interface {
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Pod, error)
}, pod *corev1.Pod, id uint32) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, keys.AnnotationJobID, id)
	_, err := c.Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func deleteWithUID(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}

func itoa(id uint32) string { return fmt.Sprint(id) }
