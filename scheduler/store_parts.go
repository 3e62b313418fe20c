package scheduler

// The small parts' views of the store: the GPU claims, the job watch, the
// retry queue, the release endpoint and the TenantPolicy cap. Each method
// takes the store's lock; the parts never hold it.

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/slurmrest"
)

// claimRecords is the GPU claims' view of the store.
type claimRecords struct{ s *store }

// jobOnNode is the running placeholder job of the pod and the Slurm
// node the pod was placed on.
func (r claimRecords) jobOnNode(pod *corev1.Pod) (*slurmrest.Job, string, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p := r.s.places[ownerOf(pod).key()]
	if p == nil || p.job == nil || p.job.State.Base() != slurmrest.JobRunning {
		return nil, "", fmt.Errorf("%w: the pod's Slurm job is not running", ErrGPUClaim)
	}
	n, ok := p.assigned[pod.UID]
	if !ok {
		return nil, "", fmt.Errorf("%w: the pod has no node of Slurm job %d yet", ErrGPUClaim, p.jobID)
	}
	j := *p.job
	return &j, n, nil
}

// watchRecords is the job watch's view of the store.
type watchRecords struct{ s *store }

// owned are the live jobs to ask about with their last known state
// (nil: not seen yet): those submitted within startWindow, and with all
// every job of a placement that has not ended.
func (r watchRecords) owned(all bool) map[uint32]slurmrest.JobState {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	out := map[uint32]slurmrest.JobState{}
	for id, at := range r.s.starting {
		if time.Since(at) > startWindow {
			delete(r.s.starting, id)
			continue
		}
		out[id] = nil
	}
	for id, key := range r.s.byJob {
		p := r.s.places[key]
		if p == nil || p.jobID != id || p.ended() {
			continue
		}
		if _, fast := out[id]; !all && !fast {
			continue
		}
		if p.job != nil {
			out[id] = p.job.State
		}
	}
	return out
}

// retryRecords is the retry queue's view of the store.
type retryRecords struct{ s *store }

// due returns the pods of it that still wait: a refused placement's pods,
// or the pod unless it was bound or deleted.
func (r retryRecords) due(it retryItem) []*corev1.Pod {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if it.Owner != "" {
		if p := r.s.places[it.Owner]; p != nil && p.jobID == 0 && p.rejected {
			return r.s.membersLocked(p.owner)
		}
		return nil
	}
	if _, gone := r.s.deleted[it.UID]; gone {
		return nil
	}
	if pod, ok := r.s.pods[it.UID]; ok {
		if pod.Spec.NodeName != "" {
			return nil
		}
		return []*corev1.Pod{pod}
	}
	// Not yet told of by the informer: the scheduling queue finds a pod
	// by its namespace, name and uid.
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: it.Pod.Namespace, Name: it.Pod.Name, UID: it.UID}}}
}

// releaseRecords is the release endpoint's view of the store.
type releaseRecords struct{ s *store }

// jobPods is what the store knows of a job's pods.
type jobPods struct {
	synced   bool                 // Slurm's jobs were read
	owner    *owner               // the job's placement's owner; nil: no placement holds it
	released bool                 // no placement holds it, and its pods were confirmed gone lately
	present  int                  // the job's pods onepool knows
	counts   func(types.UID) bool // whether a pod that is gone was the job's
}

// pods says what the store knows of job id's pods.
func (r releaseRecords) pods(id uint32) jobPods {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if !r.s.synced {
		return jobPods{}
	}
	out := jobPods{synced: true}
	var p *placement
	if key, ok := r.s.byJob[id]; ok {
		p = r.s.places[key]
	}
	if p == nil {
		out.released = r.wasReleasedLocked(id)
		return out
	}
	o := p.owner
	ofJob, _ := p.split(r.s.membersLocked(o))
	out.owner, out.present, out.counts = &o, len(ofJob), p.goneCounts()
	return out
}

// wasReleasedLocked says whether job id was a dropped placement's within
// releasedFor: its pods are gone.
func (r releaseRecords) wasReleasedLocked(id uint32) bool {
	at, ok := r.s.released[id]
	return ok && time.Since(at) < releasedFor
}

// capRecords is the TenantPolicy cap's view of the store.
type capRecords struct{ s *store }

// reserve counts the GPUs held by the placements other than key's: a live
// job's pods' (gpus says a pod's under the policy, 0 when another covers
// it) and a submission's reserved ones. When key's want more stay within
// limit, they are reserved for key's submission (ok).
func (r capRecords) reserve(key string, want, limit int64, gpus func(*corev1.Pod) int64) (held int64, ok bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for k, p := range r.s.places {
		if k == key {
			continue
		}
		if p.jobID == 0 {
			held += p.reserved
			continue
		}
		if p.ended() {
			continue
		}
		if ms := r.s.membersLocked(p.owner); len(ms) > 0 {
			held += gpus(ms[0]) * int64(len(ms))
		}
	}
	if held+want > limit {
		return held, false
	}
	if pl := r.s.places[key]; pl != nil {
		pl.reserved = want
	}
	return held, true
}
