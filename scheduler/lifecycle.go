package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// lifecycle ends pods and jobs together, one placement (by key) at a
// time from its queue: it cancels the job of pods that are gone and
// evicts the pods of a job that ended or is being preempted.
type lifecycle struct {
	st       lifeRecords
	q        workqueue.TypedRateLimitingInterface[string]
	slurm    Slurm
	jobs     JobCache
	kube     kubernetes.Interface
	recorder events.EventRecorder
	leader   Leadership
	metrics  *metrics
	log      klog.Logger
	// observe takes a job read from Slurm; jobOf says whether a job is an
	// owner's placeholder; constraints works out the nodes a job leaves
	// out; activate moves pods back into the scheduling queue.
	observe     func(slurmrest.Job)
	jobOf       func(slurmrest.Job, owner) bool
	constraints func(ctx context.Context, members []*corev1.Pod, avoid []string) ([]string, string, error)
	activate    func(pods []*corev1.Pod)
}

// run reconciles placements until the queue shuts down.
func (c *lifecycle) run(ctx context.Context) {
	for {
		key, quit := c.q.Get()
		if quit {
			return
		}
		after, err := c.reconcile(ctx, key)
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.V(2).Info("Reconciling a placement failed; retrying", "placement", key, "err", err.Error())
			c.q.AddRateLimited(key)
		case after > 0:
			c.q.Forget(key)
			c.q.AddAfter(key, after)
		default:
			c.q.Forget(key)
		}
		c.q.Done(key)
	}
}

// reconcile ends pods and jobs together: a job whose pods are gone is
// cancelled, pods whose job ended are evicted, duplicates are cancelled.
// Nothing happens while Slurm's state is unknown or another replica may
// lead.
func (c *lifecycle) reconcile(ctx context.Context, key string) (time.Duration, error) {
	if c.jobs.Stale() || !c.leader.IsLeader() {
		return 2 * time.Second, nil
	}
	v, ok := c.st.view(key)
	if !ok {
		return 0, nil
	}
	p, o, jobID, job, missing, members := v.p, v.owner, v.jobID, v.job, v.missing, v.members
	for _, id := range v.extra {
		if err := c.slurm.CancelJob(ctx, id); err != nil && !errors.Is(err, slurmrest.ErrNotFound) {
			c.st.keepExtra(p, id)
			return 0, err
		}
		c.log.Info("Cancelled a duplicate placeholder job", "owner", o.String(), "job", id, "kept", jobID)
	}
	if jobID == 0 {
		if len(members) == 0 {
			c.dropIfIdle(key, p)
		}
		return 0, nil
	}
	if job == nil && !missing {
		// Submitted, not seen yet: the cache lists it within a poll or two;
		// only a job Slurm denies knowing is missing.
		if j, err := c.jobs.Job(jobID); err == nil {
			c.observe(j)
			return 0, nil
		}
		if time.Since(v.submitted) < 10*time.Second {
			return 2 * time.Second, nil
		}
		// Missing only when the fresh listing lacks it and Slurm itself
		// says it has no such job.
		j, err := c.slurm.GetJob(ctx, jobID)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			c.st.missing(p)
			missing = true
		case err != nil:
			return 0, err
		case !c.jobOf(*j, o):
			// A recorded id (the pod's own word) naming a job that is not
			// this owner's placeholder: never adopted, as adoptRecorded
			// would have refused had the cache held that job.
			c.st.disown(p, key, jobID)
			return 0, nil
		default:
			c.observe(*j)
			return 0, nil
		}
	}
	if len(members) == 0 {
		gone, err := podsGone(ctx, c.kube, o, v.counts)
		if err != nil {
			return 0, err
		}
		if !gone {
			return 2 * time.Second, nil // the informer is behind
		}
		if !missing && !job.State.Finished() {
			c.st.closing(p, jobID)
			if err := c.slurm.CancelJob(ctx, jobID); err != nil && !errors.Is(err, slurmrest.ErrNotFound) {
				return 0, err
			}
			c.log.Info("Cancelled the placeholder job of a pod that is gone", "owner", o.String(), "job", jobID)
			return 5 * time.Second, nil // look again until Slurm lists it ended
		}
		c.dropIfIdle(key, p)
		return 0, nil
	}
	if v.reexclude {
		// Only a job still waiting can change where it runs; the flag
		// stays until its job is seen (a job not listed yet returned above).
		if !missing && job.State.Base() == slurmrest.JobPending {
			if err := c.reexclude(ctx, p, jobID, members); err != nil {
				return 0, err
			}
		}
		c.st.reexcluded(p, jobID)
	}
	if !missing && !job.State.Finished() {
		// A job adopted from Slurm (its submitter died before it could
		// say so) is recorded on its pods here.
		if err := c.recordJobID(ctx, members, jobID); err != nil || job.PreemptTime.IsZero() {
			return 0, err
		}
	}
	cause := evictionCause(jobID, job, missing)
	now := time.Now()
	var errs []error
	for _, m := range members {
		if m.DeletionTimestamp != nil {
			continue
		}
		if err := c.evictOrDelete(ctx, m, cause, evictionGrace(m, cause, now)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return 5 * time.Second, nil // until the pods are gone
}

// evictOrDelete evicts a pod whose job ended or is being preempted, with
// an event naming the cause and the given termination grace (nil: the
// pod's own). A PodDisruptionBudget that refuses the eviction is
// overridden at once by a delete with the same grace, with an event
// saying so: Slurm has already decided, and the job's GPUs go to another
// job when it ends (at once for an ended job, at the end of the QOS
// GraceTime for a preempted one). Waiting on the budget would leave the
// pod running on GPUs Slurm gave away.
func (c *lifecycle) evictOrDelete(ctx context.Context, pod *corev1.Pod, cause eviction, grace *int64) error {
	if c.st.evicting(pod.UID) {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, cause.reason, keys.ActionEvict, "%s", cause.note)
		c.metrics.evictions.WithLabelValues(cause.label).Inc()
	}
	err := evict(ctx, c.kube.CoreV1().Pods(pod.Namespace), pod, grace)
	if err == nil {
		return nil
	}
	if apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause) {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, keys.EventBudgetOverridden, keys.ActionDeletePod,
			"a PodDisruptionBudget refused the eviction; the pod is deleted anyway: Slurm has already decided (%s)", cause.note)
		pods := c.kube.CoreV1().Pods(pod.Namespace)
		if err := markDisruption(ctx, pods, pod, cause.note); err != nil {
			// The pod goes all the same: its GPUs are Slurm's again.
			c.log.Info("deleting the pod without its DisruptionTarget condition", "pod", klog.KObj(pod), "err", err.Error())
		}
		opts := deleteWithUID(pod.UID)
		opts.GracePeriodSeconds = grace
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = pods.Delete(dctx, pod.Name, opts)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
	}
	return err
}

// dropIfIdle forgets a placement whose pods and job are both done; pods
// that wait for their TenantPolicy's GPU cap try again.
func (c *lifecycle) dropIfIdle(key string, p *placement) {
	c.activate(c.st.dropIfIdle(key, p))
}

// recordJobID writes the job id on the members that do not carry it yet.
func (c *lifecycle) recordJobID(ctx context.Context, members []*corev1.Pod, id uint32) error {
	var errs []error
	for _, m := range members {
		if m.DeletionTimestamp != nil || m.Annotations[keys.AnnotationJobID] == itoa(id) {
			continue
		}
		errs = append(errs, annotateJobID(ctx, c.kube.CoreV1().Pods(m.Namespace), m, id))
	}
	return errors.Join(errs...)
}

// reexclude tells Slurm the nodes a job waiting in its queue now leaves
// out, when Nodes changed since it was asked: a node labelled for the pod
// since is let in, one tainted or relabelled away is left out (else Slurm
// could start the job there, and it would be given back). When no node
// fits any more the job is left as it is: a job started where the pod
// cannot run is given back then (Place).
func (c *lifecycle) reexclude(ctx context.Context, p *placement, jobID uint32, members []*corev1.Pod) error {
	avoid, was := c.st.exclusions(p)
	excluded, unfit, err := c.constraints(ctx, members, avoid)
	if err != nil || unfit != "" || slices.Equal(excluded, was) {
		return err
	}
	if excluded == nil {
		excluded = []string{}
	}
	if err := c.slurm.UpdateJob(ctx, jobID, slurmrest.JobUpdate{ExcludedNodes: &excluded}); err != nil {
		return fmt.Errorf("tell Slurm the nodes job %d now leaves out: %w", jobID, err)
	}
	c.st.excluded(p, jobID, excluded)
	c.log.Info("Nodes changed while a placeholder job waited; told Slurm the nodes it leaves out now", "owner", p.owner.String(), "job", jobID, "excluded", excluded, "before", was)
	return nil
}
