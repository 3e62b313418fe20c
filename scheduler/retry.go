package scheduler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// Some refusals pass by themselves, and no Kubernetes event need follow
// to bring the pod back into the scheduling queue: a namespace made a
// moment before its pod reaches the scheduler's cache (its event may come
// while the pod is between queues, where an activation is lost), and a
// job Slurm refused may fit once a node registers or an admin fixes a
// QOS. Such pods are placed again after a delay that grows with each
// refusal.
const (
	// rejectFirst is the delay after Slurm's first refusal of a job;
	// each further refusal doubles it, up to rejectRetry.
	rejectFirst = 10 * time.Second
	// rejectRetry: a job Slurm refused is asked again after at most this
	// long even when nothing changes (an admin may have fixed the QOS).
	rejectRetry = 5 * time.Minute

	notCachedFirst = time.Second
	notCachedMax   = 30 * time.Second
)

// retryItem is a pod, or the pods of a placement, to place again.
type retryItem struct {
	// Owner: the key of a placement whose job Slurm refused.
	Owner string
	// Pod: a pod refused before it could be judged.
	Pod types.NamespacedName
	UID types.UID
}

// retrier places pods again after a delay: a refused placement's pods,
// or a pod refused before it could be judged, unless bound or deleted by
// then (read from the store).
type retrier struct {
	q        workqueue.TypedRateLimitingInterface[retryItem]
	st       *store
	activate func(pods []*corev1.Pod)
}

func newRetrier(st *store, activate func(pods []*corev1.Pod)) *retrier {
	return &retrier{
		q: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[retryItem](notCachedFirst, notCachedMax),
			workqueue.TypedRateLimitingQueueConfig[retryItem]{Name: "onepool-retry"}),
		st: st, activate: activate,
	}
}

// rejectDelay is how long a job Slurm has refused n times in a row waits
// before it is asked again.
func rejectDelay(n int) time.Duration {
	d := rejectFirst
	for i := 1; i < n && d < rejectRetry; i++ {
		d *= 2
	}
	return min(d, rejectRetry)
}

// rejected places the pods of placement key again once its refusal's
// delay has passed (Place then asks Slurm again).
func (r *retrier) rejected(key string, after time.Duration) {
	r.q.AddAfter(retryItem{Owner: key}, after)
}

// pod places a pod again soon; each call for the same pod waits longer,
// up to notCachedMax.
func (r *retrier) pod(pod *corev1.Pod) {
	r.q.AddRateLimited(podRetry(pod))
}

// forget drops a deleted pod's backoff.
func (r *retrier) forget(pod *corev1.Pod) {
	r.q.Forget(podRetry(pod))
}

func podRetry(pod *corev1.Pod) retryItem {
	return retryItem{Pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, UID: pod.UID}
}

// run places pods again until the queue shuts down.
func (r *retrier) run(ctx context.Context) {
	for {
		it, quit := r.q.Get()
		if quit {
			return
		}
		if ctx.Err() == nil {
			r.activate(r.due(it))
		}
		r.q.Done(it)
	}
}

// due returns the pods of it that still wait: a refused placement's pods,
// or the pod unless it was bound or deleted.
func (r *retrier) due(it retryItem) []*corev1.Pod {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if it.Owner != "" {
		if p := r.st.places[it.Owner]; p != nil && p.jobID == 0 && p.rejected {
			return r.st.membersLocked(p.owner)
		}
		return nil
	}
	if _, gone := r.st.deleted[it.UID]; gone {
		return nil
	}
	if pod, ok := r.st.pods[it.UID]; ok {
		if pod.Spec.NodeName != "" {
			return nil
		}
		return []*corev1.Pod{pod}
	}
	// Not yet told of by the informer: the scheduling queue finds a pod
	// by its namespace, name and uid.
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: it.Pod.Namespace, Name: it.Pod.Name, UID: it.UID}}}
}
