package scheduler

import "time"

// slurmDoes is what the fake Slurm does by itself, as slurmctld would: a
// job started, ended, preempted; a QOS refused, a node added. Each method
// takes the fake's lock.
type slurmDoes struct{ f *fakeSlurmrestd }

// does has the fake act as slurmctld.
func (f *fakeSlurmrestd) does() slurmDoes { return slurmDoes{f} }

// change edits job id as slurmctld would, under the lock.
func (d slurmDoes) change(id uint32, edit func(j *slurmJob)) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	j := d.f.jobs[id]
	if j == nil {
		d.f.t.Errorf("Slurm has no job %d", id) // not FailNow: a subtest's goroutine may call
		return
	}
	edit(j)
	d.f.changed = time.Now()
}

// start runs a pending job on nodes.
func (d slurmDoes) start(id uint32, nodes ...string) {
	d.change(id, func(j *slurmJob) {
		j.State, j.Reason, j.Start, j.Nodes = "RUNNING", "None", time.Now(), nodes
		j.End = j.Start.Add(j.TimeLimit)
	})
}

// end ends a job in state (TIMEOUT, CANCELLED, FAILED, ...).
func (d slurmDoes) end(id uint32, state string) {
	d.change(id, func(j *slurmJob) { j.State, j.End = state, time.Now() })
}

// preempt begins preempting a running job: it stays RUNNING until the
// QOS's GraceTime ends (its end_time).
func (d slurmDoes) preempt(id uint32, grace time.Duration) {
	d.change(id, func(j *slurmJob) { j.Preempt, j.End = time.Now(), time.Now().Add(grace) })
}

// grantIn makes immediate allocations in partition succeed, on nodes.
func (d slurmDoes) grantIn(partition string, nodes ...string) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.grants[partition] = nodes
}

// refuseQOS makes Slurm refuse jobs asking qos, as an unknown QOS.
func (d slurmDoes) refuseQOS(qos string) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.badQOS[qos] = true
}

// addNode makes Slurm know a node (GET /nodes/ lists it).
func (d slurmDoes) addNode(name string) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.nodes[name] = true
}
