package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
)

var metav1GetOptions = metav1.GetOptions{}

// listOf selects a group owner's pods.
func listOf(o owner) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: o.selector().String()}
}

// GroupReader reads what a gang's pods do not say themselves, from the
// object that made them: a PodGroup, or a LeaderWorkerSet.
type GroupReader interface {
	PodGroup(ctx context.Context, namespace, name string) (Group, error)
	LeaderWorkerSet(ctx context.Context, namespace, name string) (Group, error)
	JobSet(ctx context.Context, namespace, name, replicatedJob string) (Group, error)
}

// Group is what onepool reads of a gang's object: its uid (named in the
// gang's placeholder comment) and how many pods one job places.
type Group struct {
	UID       types.UID
	MinMember int
}

// groupOf reads the object behind a group owner.
func groupOf(ctx context.Context, r GroupReader, o owner) (Group, error) {
	switch o.Kind {
	case kindLWS:
		return r.LeaderWorkerSet(ctx, o.Namespace, o.Name)
	case kindJobSet:
		rj, _ := o.replicatedJob()
		return r.JobSet(ctx, o.Namespace, o.Name, rj)
	}
	return r.PodGroup(ctx, o.Namespace, o.Name)
}

// PodGroupGVR is scheduler-plugins' PodGroup (coscheduling).
var PodGroupGVR = schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}

// LeaderWorkerSetGVR is sigs.k8s.io/lws's LeaderWorkerSet.
var LeaderWorkerSetGVR = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}

// JobSetGVR is sigs.k8s.io/jobset's JobSet.
var JobSetGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// jobSetExclusiveTopology is JobSet's annotation for Jobs alone in a
// topology domain.
const jobSetExclusiveTopology = "alpha.jobset.sigs.k8s.io/exclusive-topology"

// JobSet reads the size of a replicated job's gang from the JobSet: its
// replicas × its Job template's parallelism (each 1 when unset). A
// replicated job whose Jobs run their pods in waves (completions above
// parallelism) or that asks JobSet for exclusive placement (its leader
// pods placed first) cannot be one job of all its pods at once: refused
// with the reason.
func (g DynamicGroups) JobSet(ctx context.Context, namespace, name, replicatedJob string) (Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := g.Client.Resource(JobSetGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Group{}, fmt.Errorf("JobSet %s/%s: %w", namespace, name, err)
	}
	n, err := jobSetGang(u, replicatedJob)
	if err != nil {
		return Group{}, fmt.Errorf("JobSet %s/%s: %w", namespace, name, err)
	}
	return Group{UID: u.GetUID(), MinMember: n}, nil
}

func jobSetGang(u *unstructured.Unstructured, replicatedJob string) (int, error) {
	if _, ok := u.GetAnnotations()[jobSetExclusiveTopology]; ok {
		return 0, fmt.Errorf("%s places a Job's leader pod before its others, and onepool places a replicated job as one job, all its pods at once: Slurm gives each pod a node of its own", jobSetExclusiveTopology)
	}
	rjs, _, _ := unstructured.NestedSlice(u.Object, "spec", "replicatedJobs")
	for _, r := range rjs {
		rj, ok := r.(map[string]any)
		if !ok || rj["name"] != replicatedJob {
			continue
		}
		num := func(path ...string) (int64, error) {
			v, found, err := unstructured.NestedInt64(rj, path...)
			switch {
			case err != nil:
				return 0, fmt.Errorf("replicated job %s: %s: %w", replicatedJob, strings.Join(path, "."), err)
			case !found:
				return 1, nil
			}
			return v, nil
		}
		replicas, err1 := num("replicas")
		parallelism, err2 := num("template", "spec", "parallelism")
		completions, err3 := num("template", "spec", "completions")
		if err := errors.Join(err1, err2, err3); err != nil {
			return 0, err
		}
		if ann, _, _ := unstructured.NestedStringMap(rj, "template", "metadata", "annotations"); ann[jobSetExclusiveTopology] != "" {
			return 0, fmt.Errorf("replicated job %s: %s places a Job's leader pod before its others, and onepool places a replicated job as one job, all its pods at once", replicatedJob, jobSetExclusiveTopology)
		}
		if completions > parallelism {
			return 0, fmt.Errorf("replicated job %s: its Jobs run %d pods in waves of %d (completions above parallelism), and onepool places a replicated job as one job, all its pods at once", replicatedJob, completions, parallelism)
		}
		if n := replicas * parallelism; n >= 1 && n <= maxGang {
			return int(n), nil
		}
		return 0, fmt.Errorf("replicated job %s: replicas × parallelism must be 1 to %d", replicatedJob, maxGang)
	}
	return 0, fmt.Errorf("no replicated job %s", replicatedJob)
}

// maxGang is the most pods one gang's job places.
const maxGang = 4096

// DynamicGroups reads PodGroups and LeaderWorkerSets without importing
// their projects' types.
type DynamicGroups struct{ Client dynamic.Interface }

func (g DynamicGroups) PodGroup(ctx context.Context, namespace, name string) (Group, error) {
	return g.read(ctx, PodGroupGVR, "PodGroup", namespace, name, nil, "spec", "minMember")
}

// LeaderWorkerSet reads a LeaderWorkerSet's group size (leader and
// workers), spec.leaderWorkerTemplate.size: from the object, not from the
// size annotation on its pods, which any pod author could write. A
// LeaderWorkerSet whose workers are made only once its leader is Ready
// (startupPolicy LeaderReady) or placed (the exclusive-topology
// annotation) is refused with the reason: its group can never be whole
// before one job places it, all at once.
func (g DynamicGroups) LeaderWorkerSet(ctx context.Context, namespace, name string) (Group, error) {
	return g.read(ctx, LeaderWorkerSetGVR, "LeaderWorkerSet", namespace, name, func(u *unstructured.Unstructured) error {
		if p, _, _ := unstructured.NestedString(u.Object, "spec", "startupPolicy"); p == "LeaderReady" {
			return errors.New("startupPolicy LeaderReady makes its workers only once the leader is Ready, and onepool places a group as one job, all its pods at once: use LeaderCreated")
		}
		if _, ok := u.GetAnnotations()[lwsExclusiveTopology]; ok {
			return fmt.Errorf("%s makes its workers only once the leader is placed, and onepool places a group as one job, all its pods at once: Slurm gives each pod a node of its own", lwsExclusiveTopology)
		}
		return nil
	}, "spec", "leaderWorkerTemplate", "size")
}

// lwsExclusiveTopology is LeaderWorkerSet's annotation for a group alone
// in a topology domain.
const lwsExclusiveTopology = "leaderworkerset.sigs.k8s.io/exclusive-topology"

func (g DynamicGroups) read(ctx context.Context, gvr schema.GroupVersionResource, kind, namespace, name string, check func(*unstructured.Unstructured) error, size ...string) (Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := g.Client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Group{}, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
	}
	if check != nil {
		if err := check(u); err != nil {
			return Group{}, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
		}
	}
	n, found, err := unstructured.NestedInt64(u.Object, size...)
	if err != nil || !found || n < 1 || n > maxGang {
		return Group{}, fmt.Errorf("%s %s/%s: %s must be 1 to %d", kind, namespace, name, strings.Join(size, "."), maxGang)
	}
	return Group{UID: u.GetUID(), MinMember: int(n)}, nil
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
