package scheduler

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	st       retryRecords
	activate func(pods []*corev1.Pod)
}

func newRetrier(st retryRecords, activate func(pods []*corev1.Pod)) *retrier {
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
			r.activate(r.st.due(it))
		}
		r.q.Done(it)
	}
}
