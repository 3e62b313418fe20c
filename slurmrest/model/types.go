// Package model holds onepool's version-neutral view of Slurm: the types every
// component uses, whatever REST API version the adapter speaks.
package model

import (
	"maps"
	"math"
	"slices"
	"time"
)

// UnlimitedTime as a JobSubmit's TimeLimit asks for no time limit (Slurm's
// UNLIMITED, as `sbatch --time=UNLIMITED`): the job runs until it ends or
// is cancelled, unless the partition's MaxTime refuses it.
const UnlimitedTime time.Duration = math.MaxInt64

// NodeState is Slurm's node state: one base state (IDLE, ALLOCATED, MIXED,
// DOWN, ERROR, FUTURE, UNKNOWN) followed by flags (DRAIN, COMPLETING,
// NOT_RESPONDING, CLOUD, POWERED_DOWN, ...), as slurmrestd lists them.
type NodeState []string

// Node states and flags onepool reads.
const (
	NodeIdle          = "IDLE"
	NodeAllocated     = "ALLOCATED"
	NodeMixed         = "MIXED"
	NodeDown          = "DOWN"
	NodeUnknown       = "UNKNOWN"
	NodeFlagDrain     = "DRAIN"
	NodeFlagComplete  = "COMPLETING"
	NodeFlagNoRespond = "NOT_RESPONDING"
)

var baseNodeStates = []string{NodeIdle, NodeAllocated, NodeMixed, NodeDown, "ERROR", "FUTURE", NodeUnknown}

// Base is the base state, or UNKNOWN when none is listed.
func (s NodeState) Base() string {
	for _, v := range s {
		if slices.Contains(baseNodeStates, v) {
			return v
		}
	}
	return NodeUnknown
}

// Has says whether the state lists flag.
func (s NodeState) Has(flag string) bool { return slices.Contains(s, flag) }

// Drain says whether the node is drained or draining: Slurm starts nothing new on it.
func (s NodeState) Drain() bool { return s.Has(NodeFlagDrain) }

// Busy says whether jobs still run or finish on the node.
func (s NodeState) Busy() bool {
	b := s.Base()
	return b == NodeAllocated || b == NodeMixed || s.Has(NodeFlagComplete)
}

// Drained says whether the node is drained and empty (sinfo's "drained").
func (s NodeState) Drained() bool { return s.Drain() && !s.Busy() }

// Node is one Slurm node.
type Node struct {
	Name            string
	Hostname        string
	Address         string
	State           NodeState
	Reason          string // meaningful only while State.Drain() or DOWN
	ReasonSetByUser string
	ReasonChanged   time.Time
	Partitions      []string
	Features        []string
	CPUs            int
	RealMemoryMB    int64
	Gres            string // configured, e.g. "gpu:h100:8"
	GresUsed        string // e.g. "gpu:h100:8(IDX:0-7)"
	Comment         string
	BootTime        time.Time
	SlurmdStarted   time.Time
	SlurmVersion    string
}

// Equal compares what a node is, leaving out what changes at every ping
// (slurmd start time, boot time), so a ping is not a change.
func (n *Node) Equal(o *Node) bool {
	if n == nil || o == nil {
		return n == o
	}
	return n.Name == o.Name && n.Hostname == o.Hostname && n.Address == o.Address &&
		slices.Equal(n.State, o.State) && n.Reason == o.Reason && n.ReasonSetByUser == o.ReasonSetByUser &&
		n.ReasonChanged.Equal(o.ReasonChanged) && slices.Equal(n.Partitions, o.Partitions) &&
		slices.Equal(n.Features, o.Features) && n.CPUs == o.CPUs && n.RealMemoryMB == o.RealMemoryMB &&
		n.Gres == o.Gres && n.GresUsed == o.GresUsed && n.Comment == o.Comment && n.SlurmVersion == o.SlurmVersion
}

// JobState is Slurm's job state: a base state (PENDING, RUNNING, COMPLETED,
// CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...)
// followed by flags (COMPLETING, REQUEUED, ...).
type JobState []string

// Job states onepool reads.
const (
	JobPending   = "PENDING"
	JobRunning   = "RUNNING"
	JobSuspended = "SUSPENDED"
	JobCompleted = "COMPLETED"
	JobCancelled = "CANCELLED"
	JobFailed    = "FAILED"
	JobTimeout   = "TIMEOUT"
	JobNodeFail  = "NODE_FAIL"
	JobPreempted = "PREEMPTED"
	JobBootFail  = "BOOT_FAIL"
	JobDeadline  = "DEADLINE"
	JobOOM       = "OUT_OF_MEMORY"
)

var activeJobStates = []string{JobPending, JobRunning, JobSuspended}

// Base is the base state (the first entry), or "" when empty.
func (s JobState) Base() string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// Has says whether the state lists flag.
func (s JobState) Has(flag string) bool { return slices.Contains(s, flag) }

// Finished says whether the job ended for good (not pending, running or
// suspended). An empty state is not finished: it is unknown.
func (s JobState) Finished() bool {
	return len(s) > 0 && !slices.Contains(activeJobStates, s.Base())
}

// Job is one Slurm job.
type Job struct {
	ID         uint32
	Name       string
	User       string
	Account    string
	Partition  string
	QOS        string
	State      JobState
	Reason     string // why it pends, or why it ended
	Nodes      string // allocated nodes as a hostlist ("gpu-[0-1]")
	Comment    string
	Priority   uint32
	SubmitTime time.Time
	StartTime  time.Time
	EndTime    time.Time
	// PreemptTime is when Slurm began preempting the job (zero: it has
	// not). The job stays RUNNING through its GraceTime; EndTime is then
	// the deadline.
	PreemptTime time.Time
	// TimeLimit is the job's time limit as Slurm set it (the job's own,
	// else its partition's or QOS's); zero for none (UNLIMITED).
	TimeLimit   time.Duration
	TresPerNode string
	ExitCode    int32
	// GresDetail is Slurm's GRES detail per allocated node, as `scontrol
	// show job -d` prints it: "gpu:h100:2(IDX:0-1)". Read it with GPUIndexes.
	GresDetail map[string]string
}

// Equal compares two jobs field by field.
func (j *Job) Equal(o *Job) bool {
	if j == nil || o == nil {
		return j == o
	}
	return j.ID == o.ID && j.Name == o.Name && j.User == o.User && j.Account == o.Account &&
		j.Partition == o.Partition && j.QOS == o.QOS && slices.Equal(j.State, o.State) && j.Reason == o.Reason &&
		j.Nodes == o.Nodes && j.Comment == o.Comment && j.Priority == o.Priority &&
		j.SubmitTime.Equal(o.SubmitTime) && j.StartTime.Equal(o.StartTime) && j.EndTime.Equal(o.EndTime) && j.PreemptTime.Equal(o.PreemptTime) &&
		j.TimeLimit == o.TimeLimit && j.TresPerNode == o.TresPerNode && j.ExitCode == o.ExitCode && maps.Equal(j.GresDetail, o.GresDetail)
}

// JobStateEntry is one line of the light /jobs/state listing.
type JobStateEntry struct {
	ID    uint32
	State JobState
}

// Partition is one Slurm partition.
type Partition struct {
	Name       string
	Nodes      string // hostlist
	TotalNodes int
	TotalCPUs  int
	State      []string
}

// NodeList is a node listing with the time slurmctld last changed a node;
// pass LastUpdate back as "since" to get only what changed after it.
type NodeList struct {
	Nodes      []Node
	LastUpdate time.Time
}

// JobList is a job listing with its update time (see NodeList). Jobs are
// those the lister kept; Listed counts every job of the answer.
type JobList struct {
	Jobs       []Job
	Listed     int
	LastUpdate time.Time
}

// NodeUpdate changes nodes. State holds what scontrol takes (DRAIN, RESUME,
// DOWN, ...); a DRAIN or DOWN needs a Reason.
type NodeUpdate struct {
	State   []string
	Reason  string
	Comment *string
	// Features, when set, become the node's available and active features.
	Features *[]string
}

// JobSubmit is a batch job to submit.
type JobSubmit struct {
	Name            string
	Script          string
	Partition       string
	Nodes           string // "1", "2-4"
	Tasks           int
	TresPerNode     string // "gres/gpu:8"
	Comment         string
	WorkDir         string
	Environment     []string
	TimeLimit       time.Duration // 0: the partition's; UnlimitedTime: none
	Hold            bool
	Priority        uint32 // 0: Slurm's choice
	QOS             string // "": the user's default QOS
	Account         string // "": the user's default account
	CPUsPerTask     int    // 0: Slurm's default (1)
	MemoryPerNodeMB int64  // 0: Slurm's default (DefMemPerCPU)
	// NoRequeue keeps Slurm from requeueing the job after a node failure or
	// preemption: it ends instead.
	NoRequeue bool
	// Sharing is how the job shares its nodes with other jobs.
	Sharing JobSharing
	// ExcludedNodes are Slurm nodes the job may not use (sbatch --exclude).
	// Each must be a node Slurm knows: an unknown name fails the whole
	// submission.
	ExcludedNodes []string
}

// JobSharing is a job's node sharing, as sbatch --exclusive sets it.
type JobSharing string

const (
	// SharingDefault: the partition's (nodes shared at GRES/CPU granularity).
	SharingDefault JobSharing = ""
	// SharingExclusive: whole nodes (--exclusive).
	SharingExclusive JobSharing = "exclusive"
	// SharingUser: nodes shared only with the same user's jobs (--exclusive=user).
	SharingUser JobSharing = "user"
)

// JobUpdate changes a job; nil fields stay as they are.
type JobUpdate struct {
	Comment   *string
	Priority  *uint32
	Hold      *bool
	TimeLimit *time.Duration
	// ExcludedNodes, when set, replace the nodes a pending job leaves out
	// (empty: none, which clears Slurm's list).
	ExcludedNodes *[]string
}
