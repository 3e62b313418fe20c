package scheduler

import (
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// store holds the scheduler's records of onepool's pods and placements,
// under one lock: what the plugin's cycles, the submission and lifecycle
// workers, the job watch, the release endpoint and the GPU claims read and
// change. Its methods named *Locked expect mu held.
type store struct {
	mu     sync.Mutex
	synced bool
	pods   map[types.UID]*corev1.Pod // onepool's pods that have not finished
	// deleted: pods the informer reported deleted, so a scheduling cycle
	// that still holds one (the framework's handlers run apart from
	// ours) never brings it back as a member.
	deleted  map[types.UID]time.Time
	places   map[string]*placement
	byJob    map[uint32]string
	starting map[uint32]time.Time // submitted jobs polled until they start
	invalid  map[types.UID]string // the last invalid-request event per pod
	evicting map[types.UID]time.Time
	released map[uint32]time.Time // jobs of dropped placements: their pods are gone
	// refusedAt: when Slurm last refused an immediate allocation, by
	// partition ("" the default one).
	refusedAt map[string]time.Time
}

func newStore() *store {
	return &store{
		pods:      map[types.UID]*corev1.Pod{},
		deleted:   map[types.UID]time.Time{},
		places:    map[string]*placement{},
		byJob:     map[uint32]string{},
		starting:  map[uint32]time.Time{},
		invalid:   map[types.UID]string{},
		evicting:  map[types.UID]time.Time{},
		released:  map[uint32]time.Time{},
		refusedAt: map[string]time.Time{},
	}
}

// trackLocked records a onepool pod (from the informer or a scheduling
// cycle).
func (s *store) trackLocked(pod *corev1.Pod) {
	if finished(pod) {
		delete(s.pods, pod.UID)
		return
	}
	s.pods[pod.UID] = pod
	if p := s.places[ownerOf(pod).key()]; p != nil {
		p.note(pod)
	}
}

// membersLocked lists the owner's pods that have not finished, by name.
func (s *store) membersLocked(o owner) []*corev1.Pod {
	var out []*corev1.Pod
	if !o.group() {
		if p, ok := s.pods[o.UID]; ok {
			out = append(out, p)
		}
		return out
	}
	for _, p := range s.pods {
		if o.has(p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// preferLocked says whether job id should replace p's job as the owner's
// placeholder, when both are live.
func (s *store) preferLocked(p *placement, id uint32) bool {
	if p.ended() {
		return false
	}
	recorded := func(id uint32) bool {
		return slices.ContainsFunc(s.membersLocked(p.owner), func(m *corev1.Pod) bool { return m.Annotations[keys.AnnotationJobID] == itoa(id) })
	}
	curMine := !p.submitted.IsZero() || recorded(p.jobID)
	newMine := recorded(id)
	if curMine != newMine {
		return newMine
	}
	return id < p.jobID
}

// anyBoundLocked says whether one of the owner's pods is bound to a node.
func (s *store) anyBoundLocked(o owner) bool {
	return slices.ContainsFunc(s.membersLocked(o), func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
}

// newerThanMembersLocked says whether job j was submitted after the owner's
// oldest pod was created: an ended job that is older belongs to pods that
// are gone.
func (s *store) newerThanMembersLocked(o owner, j slurmrest.Job) bool {
	ms := s.membersLocked(o)
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if j.SubmitTime.Add(time.Second).Before(m.CreationTimestamp.Time) {
			return false
		}
	}
	return true
}

// askMovedLocked says whether a pod onepool knows now asks other Slurm
// settings than its copy in members (what a submission judged).
func (s *store) askMovedLocked(members []*corev1.Pod) bool {
	for _, m := range members {
		if now, ok := s.pods[m.UID]; ok && askChanged(m, now) {
			return true
		}
	}
	return false
}

// ownersLocked are the keys of the placements with a pod only says (nil
// when only is nil: every placement).
func (s *store) ownersLocked(only func(*corev1.Pod) bool) map[string]bool {
	if only == nil {
		return nil
	}
	out := map[string]bool{}
	for _, p := range s.pods {
		if only(p) {
			out[ownerOf(p).key()] = true
		}
	}
	return out
}

// idReusedLocked handles Slurm listing, under a job id another owner's
// placement holds, a job of owner key: the job that placement recorded is
// gone. slurmctld lost it (a crash rolled its state back) and gave its id
// again. The placement's pods sit on GPUs Slurm no longer holds for them:
// the job is missing, and the pods go. It returns that owner's key ("" when
// the id was no one else's).
func (s *store) idReusedLocked(id uint32, key string, log klog.Logger) string {
	k, ok := s.byJob[id]
	if !ok || k == key {
		return ""
	}
	delete(s.byJob, id)
	q := s.places[k]
	if q == nil || q.jobID != id || q.missing {
		return ""
	}
	q.missing = true
	log.Info("Slurm lists another job under a placeholder job's id: the placeholder job is gone", "owner", q.owner.String(), "job", id)
	return k
}
