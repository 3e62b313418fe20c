package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Slurm's accounting (slurmdbd, through slurmrestd's /slurmdb/ endpoints):
// the QOS, accounts and associations onepool can keep as an admin's values
// say. Only the fields onepool manages are here; the adapter keeps every
// other field of an object as Slurm has it when it changes one.

// QOS preempt modes, as `sacctmgr list qos format=preemptmode` prints them.
// PreemptModeCluster (Slurm's OFF) means slurm.conf's PreemptMode.
const (
	PreemptModeCluster = "cluster"
	PreemptModeCancel  = "cancel"
	PreemptModeRequeue = "requeue"
)

// PreemptModes are the QOS preempt modes onepool sets.
var PreemptModes = []string{PreemptModeCluster, PreemptModeCancel, PreemptModeRequeue}

// QOS is one Slurm QOS as onepool reads it.
type QOS struct {
	Name        string
	Description string
	Priority    uint32
	// GraceTimeSeconds: how long a job of this QOS picked for preemption
	// has (SIGTERM first) before it is cancelled or requeued.
	GraceTimeSeconds uint32
	// Preempt lists the QOS whose jobs this one's may preempt.
	Preempt []string
	// PreemptMode is a PreemptMode* constant, or Slurm's flags in lower
	// case joined by "," ("suspend,gang") for modes onepool does not set.
	PreemptMode string
	// MaxTRESPerUser is the QOS's MaxTRESPerUser (MaxTRESPU).
	MaxTRESPerUser []TRES
}

// QOSUpdate is what to set on a QOS; nil fields (and a nil
// MaxTRESPerUser) are left as they are.
type QOSUpdate struct {
	Description      *string
	Priority         *uint32
	GraceTimeSeconds *uint32
	Preempt          *[]string
	PreemptMode      *string
	// MaxTRESPerUser sets each TRES listed; a Count of -1 removes that
	// TRES's limit. TRES not listed keep theirs.
	MaxTRESPerUser []TRES
}

// TRES is one trackable resource with a count: cpu=64, mem=1024 (MB),
// gres/gpu=8 (Type gres, Name gpu).
type TRES struct {
	Type  string
	Name  string
	Count int64
}

// Key is the TRES as Slurm names it: "cpu", "gres/gpu".
func (t TRES) Key() string {
	if t.Name == "" {
		return t.Type
	}
	return t.Type + "/" + t.Name
}

func (t TRES) String() string { return t.Key() + "=" + strconv.FormatInt(t.Count, 10) }

// ParseTRES reads Slurm's TRES list notation, "gres/gpu=8,cpu=64"; a count
// of -1 means "no limit" (sacctmgr's notation for removing one). Each TRES
// may be named once.
func ParseTRES(s string) ([]TRES, error) {
	var out []TRES
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, n, ok := strings.Cut(part, "=")
		count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if !ok || err != nil || count < -1 {
			return nil, fmt.Errorf("TRES %q: want TYPE[/NAME]=COUNT with COUNT >= -1 (e.g. gres/gpu=8)", part)
		}
		typ, name, slash := strings.Cut(strings.TrimSpace(key), "/")
		if typ == "" || (slash && name == "") || strings.ContainsAny(typ+name, " =/") {
			return nil, fmt.Errorf("TRES %q: want TYPE[/NAME]=COUNT (e.g. gres/gpu=8)", part)
		}
		t := TRES{Type: typ, Name: name, Count: count}
		if slices.ContainsFunc(out, func(o TRES) bool { return o.Key() == t.Key() }) {
			return nil, fmt.Errorf("TRES %s named twice in %q", t.Key(), s)
		}
		out = append(out, t)
	}
	return out, nil
}

// FormatTRES writes a TRES list as Slurm does ("cpu=64,gres/gpu=8"),
// sorted by name.
func FormatTRES(ts []TRES) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, t.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Account is a Slurm account. Its description and organization are set
// when it is made.
type Account struct {
	Name         string
	Description  string
	Organization string
}

// Association is a Slurm association: an account's on a cluster (User
// empty) or a user's in an account, with the QOS it may use and its
// default QOS.
type Association struct {
	Cluster   string
	Account   string
	User      string
	Partition string
	// QOS the association may use; nil when unknown or not to be set.
	QOS        []string
	DefaultQOS string
}

// AssociationUpdate is what to set on an association; nil fields are left
// as they are.
type AssociationUpdate struct {
	QOS        *[]string
	DefaultQOS *string
}
