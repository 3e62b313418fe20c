package scheduler

import "slices"

// slurmAsked is what the fake Slurm was asked and what it did, as tests
// check it: each method takes the fake's lock.
type slurmAsked struct{ f *fakeSlurmrestd }

// asked is the fake's record of what it was asked.
func (f *fakeSlurmrestd) asked() slurmAsked { return slurmAsked{f} }

// asksFor lists the requests for the job named name, in order.
func (a slurmAsked) asksFor(name string) []slurmAsk {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	var out []slurmAsk
	for _, ask := range a.f.asks {
		if ask.Job.Name == name {
			out = append(out, ask)
		}
	}
	return out
}

// submitsFor lists the batch submissions for the job named name.
func (a slurmAsked) submitsFor(name string) []slurmAsk {
	var out []slurmAsk
	for _, ask := range a.asksFor(name) {
		if ask.Path == "/job/submit" {
			out = append(out, ask)
		}
	}
	return out
}

// cancelled says whether job id was asked to be cancelled.
func (a slurmAsked) cancelled(id uint32) bool {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	return slices.Contains(a.f.cancels, id)
}

// state is job id's state now.
func (a slurmAsked) state(id uint32) string {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if j := a.f.jobs[id]; j != nil {
		return j.State
	}
	return ""
}

// unserved lists the requests this Slurm could not answer.
func (a slurmAsked) unserved() []string {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	return slices.Clone(a.f.strange)
}

// excluded is the job's ExcNodeList now.
func (a slurmAsked) excluded(id uint32) []string {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if j := a.f.jobs[id]; j != nil {
		return slices.Clone(j.Excluded)
	}
	return nil
}

// updatesOf are the updates the job got.
func (a slurmAsked) updatesOf(id uint32) []jobUpdateAsk {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	var out []jobUpdateAsk
	for _, u := range a.f.updates {
		if u.ID == id {
			out = append(out, u)
		}
	}
	return out
}
