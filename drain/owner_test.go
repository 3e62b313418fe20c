package drain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/onepool/onepool/keys"
)

func TestForm(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   Writer
	}{
		{"onepool: node cordoned", Syncer},
		{"onepool: node cordoned: PSU swap", Syncer},
		// No delimiter after the cordon reason: not the syncer's form.
		{"onepool: node cordoned by admin alice", Admin},
		{"onepool: node cordonedX", Admin},
		{"onepool: slurmd pod deleted", Syncer},
		{"onepool: slurmd pod deleted later", Admin},
		{"onepool: slurmd pod not ready", Syncer},
		{"onepool: nodeset update", NodeSet},
		{"onepool: node left nodeset gpus", NodeSet},
		{"onepool: node left nodesetX", Admin},
		{"onepool: mig config all-1g.10gb", NodeSet},
		{"onepool: mig configX", Admin},
		{"onepool: gpu xid: 79 on GPU 3", Agent},
		{"onepool: maintenance by admin", Admin},
		{"bad ECC", Admin},
		{"", Admin},
	} {
		assert.Equal(t, tc.want, Form(tc.reason), "Form(%q)", tc.reason)
	}
}

// TestDrainOwnership decides who owns the drain Slurm shows, from the
// records the syncer and the NodeSet keep: each writer's drains, with and
// without Slurm's appended cause, and admins' drains that look like
// onepool's.
func TestDrainOwnership(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	rec := func(reason string) Record { return Record{Reason: reason, At: t0} }
	words, _ := CordonReason("PSU swap")
	gpu := HealthReason("xid", "79 on GPU 3")
	left := LeftReason("gpus")
	syncer := func(rs ...Record) Records { return Records{Syncer: rs} }
	nodeSet := func(r Record) Records { return Records{NodeSet: r} }
	soon, later := t0.Add(2*time.Second), t0.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		records Records
		drained bool
		reason  string
		changed time.Time // Slurm's reason time; zero: Slurm gave none
		want    Writer
		wantRec Record // the record that makes it the writer's
	}{
		// The syncer: cordon → drain, the pod deleted or not ready.
		{"syncer: cordon", syncer(rec(ReasonCordoned)), true, ReasonCordoned, soon, Syncer, rec(ReasonCordoned)},
		{"syncer: cordon with words", syncer(rec(words)), true, words, soon, Syncer, rec(words)},
		{"syncer: pod deleted", syncer(rec(ReasonPodDeleted)), true, ReasonPodDeleted, soon, Syncer, rec(ReasonPodDeleted)},
		{"syncer: pod not ready", syncer(rec(ReasonPodNotReady)), true, ReasonPodNotReady, soon, Syncer, rec(ReasonPodNotReady)},
		{"syncer: Slurm gave no time", syncer(rec(ReasonCordoned)), true, ReasonCordoned, time.Time{}, Syncer, rec(ReasonCordoned)},
		{"syncer: the replaced drain still in Slurm", syncer(Record{Reason: ReasonPodDeleted, At: later}, rec(words)), true, words, soon, Syncer, rec(words)},
		{"syncer: the resumed drain back after a slurmctld restart", syncer(Record{}, Record{}, rec(ReasonCordoned)), true, ReasonCordoned, soon, Syncer, rec(ReasonCordoned)},
		{"syncer: drained and the NodeSet's record of another drain", Records{Syncer: []Record{rec(ReasonCordoned)}, NodeSet: rec(ReasonNodeSetUpdate)}, true, ReasonCordoned, soon, Syncer, rec(ReasonCordoned)},
		{"syncer: resumed in Slurm", syncer(rec(ReasonCordoned)), false, "", time.Time{}, None, Record{}},

		// Slurm's own cause appended (a cordoned node rebooted, a job's
		// processes that would not die): still the writer's drain.
		{"syncer + Not responding", syncer(rec(ReasonCordoned)), true, ReasonCordoned + " : Not responding", later, Syncer, rec(ReasonCordoned)},
		{"syncer + Kill task failed", syncer(rec(words)), true, words + " : Kill task failed", later, Syncer, rec(words)},
		{"nodeset + Not responding", nodeSet(rec(ReasonNodeSetUpdate)), true, ReasonNodeSetUpdate + " : Not responding", later, NodeSet, rec(ReasonNodeSetUpdate)},
		{"agent + Not responding", Records{}, true, gpu + " : Not responding", later, Agent, Record{}},
		{"appended cause set before the record: an older drain", syncer(rec(ReasonCordoned)), true, ReasonCordoned + " : Not responding", t0.Add(-10 * time.Minute), Admin, Record{}},

		// The NodeSet: scale-down (the Node left) and rolling update.
		{"nodeset: update", nodeSet(rec(ReasonNodeSetUpdate)), true, ReasonNodeSetUpdate, soon, NodeSet, rec(ReasonNodeSetUpdate)},
		{"nodeset: node left", nodeSet(rec(left)), true, left, soon, NodeSet, rec(left)},
		{"nodeset: read by the syncer beside its own", Records{Syncer: []Record{rec(ReasonCordoned)}, NodeSet: rec(left)}, true, left, soon, NodeSet, rec(left)},
		{"nodeset: resumed in Slurm", nodeSet(rec(ReasonNodeSetUpdate)), false, "", time.Time{}, None, Record{}},

		// The node agent: a GPU health drain, known by its reason alone.
		{"agent: gpu health", Records{}, true, gpu, soon, Agent, Record{}},
		{"agent: beside other records", Records{Syncer: []Record{rec(ReasonCordoned)}, NodeSet: rec(ReasonNodeSetUpdate)}, true, gpu, soon, Agent, Record{}},
		{"agent: not drained", Records{}, false, gpu, soon, None, Record{}},

		// Admins' drains that look like onepool's.
		{"admin: the cordon words, no record", Records{}, true, ReasonCordoned, soon, Admin, Record{}},
		{"admin: the cordon words long after the record", syncer(rec(ReasonCordoned)), true, ReasonCordoned, later, Admin, Record{}},
		{"admin: the cordon words long before the record", syncer(rec(ReasonCordoned)), true, ReasonCordoned, t0.Add(-time.Hour), Admin, Record{}},
		{"admin: other cordon words", syncer(rec(ReasonCordoned)), true, words, soon, Admin, Record{}},
		{"admin: cordoned by alice", syncer(rec(ReasonCordoned)), true, "onepool: node cordoned by admin alice", soon, Admin, Record{}},
		{"admin: the cordon words and more, no ' : '", syncer(rec(ReasonCordoned)), true, ReasonCordoned + ": Not responding", later, Admin, Record{}},
		{"admin: pod words, record without a time", syncer(Record{Reason: ReasonPodNotReady}), true, ReasonPodNotReady, soon, Admin, Record{}},
		{"admin: a record not of the syncer's form", syncer(rec("onepool: maintenance")), true, "onepool: maintenance", soon, Admin, Record{}},
		{"admin: the syncer's words in the NodeSet's record", nodeSet(rec(ReasonCordoned)), true, ReasonCordoned, soon, Admin, Record{}},
		{"admin: the NodeSet's words, no record", Records{}, true, ReasonNodeSetUpdate, soon, Admin, Record{}},
		{"admin: the NodeSet's words long after its record", nodeSet(rec(ReasonNodeSetUpdate)), true, ReasonNodeSetUpdate, later, Admin, Record{}},
		{"admin: another NodeSet's leaving", nodeSet(rec(left)), true, LeftReason("cpus"), soon, Admin, Record{}},
		{"admin: node left nodesetX", nodeSet(rec(ReasonNodeSetLeft + "X")), true, ReasonNodeSetLeft + "X", soon, Admin, Record{}},
		{"admin: gpu without the space", Records{}, true, "onepool: gpuX failed", soon, Admin, Record{}},
		{"admin: GPU in capitals", Records{}, true, "onepool: GPU xid 79", soon, Admin, Record{}},
		{"admin: onepool's prefix, own words", Records{}, true, "onepool: maintenance by admin", soon, Admin, Record{}},
		{"admin: plain words", Records{}, true, "bad ECC", soon, Admin, Record{}},
		{"admin: Slurm's own reason", Records{}, true, "Kill task failed", soon, Admin, Record{}},
		{"admin: drained, no reason", syncer(rec(ReasonCordoned)), true, "", soon, Admin, Record{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, r := tc.records.Owner(tc.drained, tc.reason, tc.changed)
			assert.Equal(t, tc.want, got)
			assert.True(t, tc.wantRec.Equal(r), "record %+v, want %+v", r, tc.wantRec)
			assert.Equal(t, tc.want == Syncer || tc.want == NodeSet || tc.want == Agent, got.Onepool())
		})
	}
}

// The records a Node's annotations hold, as the syncer and the NodeSet
// write them, decide a drain's owner; an object without them holds none.
func TestRecordsIn(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 35, 0, 0, time.UTC)
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	a := map[string]string{
		keys.AnnotationDrainApplied:   ReasonPodDeleted,
		keys.AnnotationDrainAppliedAt: at(0),
		keys.AnnotationDrainReplaced:  at(-30*time.Second) + " " + ReasonCordoned,
		keys.AnnotationDrainResumed:   at(-10*time.Minute) + " " + ReasonPodNotReady,
		keys.AnnotationNodeSetDrain:   ReasonNodeSetUpdate,
		keys.AnnotationNodeSetDrainAt: at(-5 * time.Minute),
	}
	rs := RecordsIn(a)
	for _, tc := range []struct {
		reason  string
		changed time.Time
		want    Writer
	}{
		{ReasonPodDeleted, t0.Add(time.Second), Syncer},
		{ReasonCordoned, t0.Add(-29 * time.Second), Syncer},    // the replaced drain, still in Slurm
		{ReasonPodNotReady, t0.Add(-10 * time.Minute), Syncer}, // the resumed one, back after a restart
		{ReasonNodeSetUpdate, t0.Add(-5 * time.Minute), NodeSet},
		{ReasonNodeSetUpdate, t0, Admin}, // the NodeSet's words, five minutes after its record
	} {
		got, _ := rs.Owner(true, tc.reason, tc.changed)
		assert.Equal(t, tc.want, got, "%q set %s", tc.reason, tc.changed.Format(time.TimeOnly))
	}
	got, _ := RecordsIn(nil).Owner(true, ReasonCordoned, t0)
	assert.Equal(t, Admin, got, "no records: onepool's words are an admin's")
}
