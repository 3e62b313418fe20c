package scheduler

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/slurmrest"
)

// coreRecords is the plugin's view of the store: what a scheduling cycle
// decides from, and what the informer's events change. Each method takes
// the store's lock; the manager never holds it.
type coreRecords struct{ s *store }

// nodeFit maps a Slurm node to its Kubernetes node and says why a pod
// cannot use a node (fitter).
type nodeFit interface {
	kubeNode(slurmNode string) (string, error)
	misfit(node string, pod *corev1.Pod) string
}

// placed is a scheduling cycle's decision and the work it queues.
type placed struct {
	decision
	submit bool // queue the owner's submission
	life   bool // queue the owner's lifecycle
	// given back: the job started on a node the pod cannot use.
	givenBack *givenBack
}

type givenBack struct {
	job             uint32
	node, slurmNode string
	why             string
}

// place decides for one pod: where its job runs, or why it waits. stale:
// Slurm's state is unknown. A job that started on a node the pod cannot
// use, of which no pod is bound yet, is given back: its node is avoided
// and a new job asked for.
func (r coreRecords) place(pod *corev1.Pod, stale bool, fit nodeFit) placed {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	o := ownerOf(pod)
	if _, gone := r.s.deleted[pod.UID]; gone {
		return placed{decision: decision{Message: "the pod was deleted"}}
	}
	if _, known := r.s.pods[pod.UID]; !known {
		// A cycle may see a pod before the informer tells onepool of it;
		// after that the informer's copy is the newer one.
		r.s.trackLocked(pod)
	}
	if !r.s.synced {
		return placed{decision: decision{Message: "onepool is reading Slurm's jobs; nothing is submitted until it knows them"}}
	}
	p := r.s.places[o.key()]
	if p == nil {
		p = newPlacement(o)
		p.note(r.s.membersLocked(o)...)
		r.s.places[o.key()] = p
	}
	if p.jobID == 0 {
		if stale {
			return placed{decision: decision{Message: "Slurm's state is unknown (slurmrestd has not answered lately); nothing is submitted until it does"}}
		}
		retry := !p.submitting && (p.err == nil || (p.rejected && time.Since(p.errAt) >= rejectDelay(p.rejections)) || p.waiting != "")
		if retry {
			p.submitting = true
		}
		return placed{decision: decision{Message: p.pendingMessage()}, submit: retry}
	}
	if !p.ofJob(pod) {
		return placed{decision: decision{Message: fmt.Sprintf("Slurm job %d was for the earlier pods of %s and takes no more; waiting for it to end to ask for a job of its own", p.jobID, o)}}
	}
	if p.ended() || p.job == nil || p.job.State.Base() != slurmrest.JobRunning {
		return placed{decision: decision{Message: p.pendingMessage()}}
	}
	slurmNode := p.nodeFor(pod, r.s.membersLocked(o))
	if slurmNode == "" {
		return placed{decision: decision{Message: fmt.Sprintf("Slurm job %d runs on %s; every node of it already has a pod of this group", p.jobID, p.job.Nodes)}}
	}
	node, err := fit.kubeNode(slurmNode)
	if err != nil {
		return placed{decision: decision{Message: fmt.Sprintf("Slurm job %d runs on Slurm node %s: %v", p.jobID, slurmNode, err)}}
	}
	why := fit.misfit(node, pod)
	if why == "" || r.s.anyBoundLocked(o) {
		return placed{decision: decision{Node: node}}
	}
	// Slurm started the job on a node the pod cannot use (cordoned before
	// its drain reached Slurm, or a Node that changed after the job was
	// asked): nothing of it runs yet, so it is given back and a new job
	// asked for that leaves this node out.
	id := p.jobID
	delete(r.s.byJob, id)
	p.abandon()
	// No pod of it was bound: its placeholder may let go at once (the
	// release answer), not at KillWait.
	r.s.released[id] = time.Now()
	if !slices.Contains(p.avoid, slurmNode) {
		p.avoid = append(p.avoid, slurmNode)
	}
	p.submitting = true
	return placed{
		decision:  decision{Message: fmt.Sprintf("Slurm job %d started on %s, where the pod cannot run (%s); it is given back and a new job asked for without %s", id, node, why, slurmNode)},
		submit:    true,
		life:      true,
		givenBack: &givenBack{job: id, node: node, slurmNode: slurmNode, why: why},
	}
}

// gated says whether the first ask to Slurm for the pod's job is in
// flight.
func (r coreRecords) gated(pod *corev1.Pod) bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p := r.s.places[ownerOf(pod).key()]
	return p != nil && p.jobID == 0 && p.submitting && p.err == nil && p.waiting == ""
}

// unconstrain clears what nodes decided of the placements with a pod only
// says (nil: all): jobs waiting in Slurm's queue are marked to have the
// nodes they leave out worked out again when reexclude (again: their
// keys); the pods no Slurm node fitted, and those whose job, which left
// nodes out, Slurm refused, are returned to be placed again.
func (r coreRecords) unconstrain(only func(*corev1.Pod) bool, reexclude bool) (wake []*corev1.Pod, again []string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	concerned := r.s.ownersLocked(only)
	for key, p := range r.s.places {
		if concerned != nil && !concerned[key] {
			continue
		}
		if p.jobID != 0 && (p.job == nil || p.job.State.Base() == slurmrest.JobPending) && reexclude {
			p.reexclude = true
			again = append(again, key)
			continue
		}
		if p.jobID != 0 || (p.unfit == "" && !(p.rejected && p.constrained)) {
			continue
		}
		if p.rejected && p.constrained {
			p.err, p.rejected, p.constrained = nil, false, false
		}
		wake = append(wake, r.s.membersLocked(p.owner)...)
	}
	return wake, again
}

// invalid records why the pod's request is invalid and returns what was
// recorded before.
func (r coreRecords) invalid(uid types.UID, why string) (last string) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	last = r.s.invalid[uid]
	r.s.invalid[uid] = why
	return last
}

// changed is what an informer's update of a pod changed.
type changed struct {
	// bound: how long after its job was submitted the pod was bound (0:
	// not bound by this update, or its job was not submitted here).
	bound time.Duration
	warn  string        // the job's time limit may end the pod early
	wake  []*corev1.Pod // placed again: a refusal of the old ask is not the new one's
}

// changed takes an informer's update of a pod (old nil: added); ok false
// when the pod was deleted already.
func (r coreRecords) changed(old, pod *corev1.Pod) (out changed, ok bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if _, gone := r.s.deleted[pod.UID]; gone {
		return out, false
	}
	r.s.trackLocked(pod)
	o := ownerOf(pod)
	if p := r.s.places[o.key()]; p != nil && old != nil && old.Spec.NodeName == "" && pod.Spec.NodeName != "" {
		if !p.submitted.IsZero() {
			out.bound = max(time.Since(p.submitted), time.Nanosecond)
		}
		out.warn = timeLimitWarning(pod, p.job)
	}
	if old != nil && askChanged(old, pod) {
		delete(r.s.invalid, pod.UID)
		if p := r.s.places[o.key()]; p != nil && p.jobID == 0 {
			if p.err != nil || p.rejected {
				// The scheduling queue may have run the pod's cycle on
				// the old refusal before this handler ran: place it again.
				out.wake = append(out.wake, pod)
			}
			p.err, p.rejected = nil, false
		}
	}
	return out, true
}

// deleted takes an informer's deletion of a pod: a scheduling cycle that
// still holds it never brings it back.
func (r coreRecords) deleted(uid types.UID) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	delete(r.s.pods, uid)
	r.s.deleted[uid] = time.Now()
	delete(r.s.invalid, uid)
	delete(r.s.evicting, uid)
}

// synced records that Slurm's jobs were read (submissions may start) and
// returns the pods not bound yet, to place.
func (r coreRecords) synced() (unbound []*corev1.Pod) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.synced = true
	for _, p := range r.s.pods {
		if p.Spec.NodeName == "" {
			unbound = append(unbound, p)
		}
	}
	return unbound
}

// forgetRefusals forgets the refusals of the pods not yet bound in
// namespace ("" every namespace), and returns those pods to place again.
func (r coreRecords) forgetRefusals(namespace string) (pending []*corev1.Pod) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, p := range r.s.pods {
		if namespace != "" && p.Namespace != namespace {
			continue
		}
		if p.Spec.NodeName == "" {
			pending = append(pending, p)
		}
		delete(r.s.invalid, p.UID)
	}
	for _, p := range r.s.places {
		if (namespace == "" || p.owner.Namespace == namespace) && p.jobID == 0 && p.rejected {
			p.err, p.rejected = nil, false
		}
	}
	return pending
}

// prune forgets release answers and deleted pods older than releasedFor.
func (r coreRecords) prune() {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for id, at := range r.s.released {
		if time.Since(at) > releasedFor {
			delete(r.s.released, id)
		}
	}
	for uid, at := range r.s.deleted {
		if time.Since(at) > releasedFor {
			delete(r.s.deleted, uid)
		}
	}
}

// placementStats counts the placements by state and finds the longest
// wait in Slurm's queue.
func (r coreRecords) placementStats(now time.Time) (map[string]int, time.Duration) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	counts := map[string]int{}
	var oldest time.Duration
	for _, p := range r.s.places {
		s := p.metricState()
		counts[s]++
		if s == placementPending && !p.submitted.IsZero() && now.Sub(p.submitted) > oldest {
			oldest = now.Sub(p.submitted)
		}
	}
	return counts, oldest
}
