package syncer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func TestPlan(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	idle := slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE"}}
	drainedAt := func(reason string, at time.Time) slurmrest.Node {
		return slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE", "DRAIN"}, Reason: reason, ReasonSetByUser: "root", ReasonChanged: at}
	}
	drainedBy := func(reason string) slurmrest.Node { return drainedAt(reason, now.Add(-time.Minute)) }
	// rec is the syncer's record of a drain it made a minute ago (a second
	// before Slurm's reason time).
	rec := func(reason string) drain.Record {
		return drain.Record{Reason: reason, At: now.Add(-time.Minute - time.Second)}
	}
	mine := func(reason string) drainRecord { return drainRecord{Record: rec(reason)} }
	long := strings.Repeat("w", 300)
	for _, tc := range []struct {
		name       string
		o          observed
		action     slurmAction
		reason     string
		redrain    bool
		keptAdmin  bool
		cordonNote string
		release    bool
		condReason string
		mirrored   bool
		recheck    time.Duration
	}{
		{name: "all well", o: observed{podReady: true, slurm: idle}, condReason: keys.ConditionReasonAvailable},
		{name: "cordon drains", o: observed{cordoned: true, podReady: true, slurm: idle},
			action: actDrain, reason: "onepool: node cordoned", condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordon with the operator's words", o: observed{cordoned: true, cordonText: "PSU swap", podReady: true, slurm: idle},
			action: actDrain, reason: "onepool: node cordoned: PSU swap", condReason: keys.ConditionReasonDrainedByOwner},
		{name: "control characters in the words: spaces, flagged", o: observed{cordoned: true, cordonText: "a\nb", podReady: true, slurm: idle},
			action: actDrain, reason: "onepool: node cordoned: a b", cordonNote: "control characters replaced by spaces", condReason: keys.ConditionReasonDrainedByOwner},
		{name: "words over the limit: cut with a mark, flagged", o: observed{cordoned: true, cordonText: long, podReady: true, slurm: idle},
			action: actDrain, reason: "onepool: node cordoned: " + long[:drain.MaxOperatorReason-len(drain.TruncatedMark)] + drain.TruncatedMark,
			cordonNote: "cut to 200 bytes", condReason: keys.ConditionReasonDrainedByOwner},
		{name: "our cut drain in place: nothing to do", o: observed{cordoned: true, cordonText: long, podReady: true,
			record: mine("onepool: node cordoned: " + long[:drain.MaxOperatorReason-len(drain.TruncatedMark)] + drain.TruncatedMark),
			slurm:  drainedBy("onepool: node cordoned: " + long[:drain.MaxOperatorReason-len(drain.TruncatedMark)] + drain.TruncatedMark)},
			cordonNote: "cut to 200 bytes", condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordoned and drained by us: nothing", o: observed{cordoned: true, podReady: true, record: mine(drain.ReasonCordoned), slurm: drainedBy(drain.ReasonCordoned)},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "uncordon resumes our drain", o: observed{podReady: true, record: mine(drain.ReasonCordoned), slurm: drainedBy(drain.ReasonCordoned)},
			action: actResume, condReason: keys.ConditionReasonAvailable},
		{name: "Node deleted: our drain and its record stay until it is back", o: observed{podReady: true, nodeMissing: true, record: mine(drain.ReasonCordoned), slurm: drainedBy(drain.ReasonCordoned)},
			condReason: keys.ConditionReasonDrainedByOwner},
		// Slurm appends its own cause when the slurmd stops answering (a
		// cordoned node rebooted) and moves the reason time.
		{name: "our drain with Slurm's cause appended: still ours, resumed on uncordon", o: observed{podReady: true, record: mine(drain.ReasonCordoned),
			slurm: drainedAt(drain.ReasonCordoned+" : Not responding", now.Add(5*time.Minute))}, action: actResume, condReason: keys.ConditionReasonAvailable},
		{name: "our drain with Slurm's cause appended, still cordoned: nothing", o: observed{cordoned: true, podReady: true, record: mine(drain.ReasonCordoned),
			slurm: drainedAt(drain.ReasonCordoned+" : Not responding", now.Add(5*time.Minute))}, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "an admin's drain with Slurm's cause appended: theirs", o: observed{podReady: true, record: mine(drain.ReasonCordoned),
			slurm: drainedAt("bad ECC : Not responding", now)}, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "uncordon keeps an admin drain", o: observed{podReady: true, slurm: drainedBy("bad ECC")},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		// Ownership is onepool's record, not the text.
		{name: "admin's look-alike cordon reason: kept and mirrored as the admin's", o: observed{podReady: true, slurm: drainedBy("onepool: node cordoned by admin alice")},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "admin's exact syncer reason without a record: kept", o: observed{podReady: true, slurm: drainedBy(drain.ReasonPodNotReady)},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "admin's onepool-looking words: the admin's", o: observed{podReady: true, slurm: drainedBy("onepool: maintenance by admin")},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "admin re-drained with our words later: theirs now", o: observed{podReady: true, record: mine(drain.ReasonCordoned),
			slurm: drainedAt(drain.ReasonCordoned, now.Add(10*time.Minute))}, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "a record without a time matches nothing", o: observed{podReady: true, record: drainRecord{Record: drain.Record{Reason: drain.ReasonCordoned}},
			slurm: drainedBy(drain.ReasonCordoned)}, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "record and Slurm differ in words: the admin's", o: observed{podReady: true, record: mine(drain.ReasonCordoned),
			slurm: drainedBy("bad ECC")}, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "Slurm gives no reason time: the record's words decide", o: observed{podReady: true, record: mine(drain.ReasonPodDeleted),
			slurm: drainedAt(drain.ReasonPodDeleted, time.Time{})}, action: actResume, condReason: keys.ConditionReasonAvailable},
		{name: "a NodeSet drain is the NodeSet's to resume", o: observed{podReady: true, nodeSetRec: rec(drain.ReasonNodeSetUpdate), slurm: drainedBy(drain.ReasonNodeSetUpdate)},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "the NodeSet's words without its record: the admin's", o: observed{podReady: true, slurm: drainedBy(drain.ReasonNodeSetUpdate)},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "a GPU health drain stays for the admin", o: observed{podReady: true, slurm: drainedBy(drain.ReasonGPUPrefix + "xid: 79")},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordon over a NodeSet drain: it stays", o: observed{cordoned: true, podReady: true, nodeSetRec: rec(drain.ReasonNodeSetUpdate), slurm: drainedBy(drain.ReasonNodeSetUpdate)},
			keptAdmin: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordon over an admin drain: theirs stays", o: observed{cordoned: true, podReady: true, slurm: drainedBy("bad ECC")},
			keptAdmin: true, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "resumed in Slurm while cordoned: drain again", o: observed{cordoned: true, podReady: true, record: mine(drain.ReasonCordoned), slurm: idle},
			action: actDrain, reason: drain.ReasonCordoned, redrain: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "pod deleted: drain, then the pod may go", o: observed{podGone: true, slurm: idle},
			action: actDrain, reason: drain.ReasonPodDeleted, release: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "pod deleted on an admin-drained node: may go", o: observed{podGone: true, slurm: drainedBy("bad ECC")},
			keptAdmin: true, release: true, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "cordoned, then pod deleted: reason follows", o: observed{podGone: true, cordoned: true, record: mine(drain.ReasonCordoned), slurm: drainedBy(drain.ReasonCordoned)},
			action: actDrain, reason: drain.ReasonPodDeleted, release: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "not ready within grace: wait", o: observed{notReadyAt: now.Add(-20 * time.Second), grace: time.Minute, slurm: idle},
			recheck: 40 * time.Second, condReason: keys.ConditionReasonAvailable},
		{name: "not ready past grace: drain", o: observed{notReadyAt: now.Add(-2 * time.Minute), grace: time.Minute, slurm: idle},
			action: actDrain, reason: drain.ReasonPodNotReady, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "DOWN shows in the condition", o: observed{podReady: true, slurm: slurmrest.Node{State: slurmrest.NodeState{"DOWN"}, Reason: "Not responding"}},
			condReason: keys.ConditionReasonDown, mirrored: true},
		{name: "NOT_RESPONDING shows in the condition", o: observed{podReady: true, slurm: slurmrest.Node{State: slurmrest.NodeState{"IDLE", "NOT_RESPONDING"}}},
			condReason: keys.ConditionReasonNotResponding, mirrored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.now = now
			d := plan(tc.o)
			if d.action != tc.action || d.reason != tc.reason {
				t.Errorf("action %v %q, want %v %q", d.action, d.reason, tc.action, tc.reason)
			}
			if d.redrain != tc.redrain || d.keptAdmin != tc.keptAdmin || d.cordonNote != tc.cordonNote || d.releasePod != tc.release {
				t.Errorf("redrain %v keptAdmin %v cordonNote %q release %v; want %v %v %q %v",
					d.redrain, d.keptAdmin, d.cordonNote, d.releasePod, tc.redrain, tc.keptAdmin, tc.cordonNote, tc.release)
			}
			if d.condition.Reason != tc.condReason {
				t.Errorf("condition reason %q, want %q", d.condition.Reason, tc.condReason)
			}
			if wantTrue := tc.condReason != keys.ConditionReasonAvailable; (d.condition.Status == corev1.ConditionTrue) != wantTrue {
				t.Errorf("condition status %s with reason %s", d.condition.Status, d.condition.Reason)
			}
			if (d.mirror != nil) != tc.mirrored {
				t.Errorf("mirror annotations %v, want present=%v", d.mirror, tc.mirrored)
			}
			if tc.mirrored && tc.o.slurm.Reason != "" && d.mirror[keys.AnnotationSlurmReason] != tc.o.slurm.Reason {
				t.Errorf("mirrored reason %q, want %q", d.mirror[keys.AnnotationSlurmReason], tc.o.slurm.Reason)
			}
			if d.recheckIn != tc.recheck {
				t.Errorf("recheck in %s, want %s", d.recheckIn, tc.recheck)
			}
		})
	}
}

// TestPlanKeepsTheReplacedDrain: a drain over onepool's own with new words
// keeps the old drain recorded until Slurm shows the new one, and a
// resumed drain stays recorded in case Slurm brings it back. The soak
// found both: the cordon's words changed while slurmctld was down (the
// record had the new words, Slurm the old), and a resume undone by
// slurmctld's restart; each drain was then kept as an admin's for good.
func TestPlanKeepsTheReplacedDrain(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const oldWords, newWords = drain.ReasonCordoned + ": PSU swap", drain.ReasonCordoned + ": PSU and fan swap"
	old := drain.Record{Reason: oldWords, At: now.Add(-10 * time.Minute)}
	tried := drain.Record{Reason: newWords, At: now.Add(-2 * time.Minute)}
	slurmShows := func(r drain.Record) slurmrest.Node {
		at := r.At.Add(time.Second)
		if r.Exact {
			at = r.At
		}
		return slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE", "DRAIN"}, Reason: r.Reason, ReasonChanged: at}
	}
	// pinned: the old drain recorded with the time Slurm shows for it.
	pinned := old.Pin(oldWords, slurmShows(old).ReasonChanged)
	const deleted = drain.ReasonPodDeleted
	for _, tc := range []struct {
		name      string
		o         observed
		action    slurmAction
		keptAdmin bool
		written   *drainRecord // nil: the record is left as it is
	}{
		{name: "new words over our drain: the old one stays recorded beside the new",
			o:      observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{Record: old}, slurm: slurmShows(old)},
			action: actDrain, written: &drainRecord{Record: drain.Record{Reason: newWords, At: now}, replaced: pinned}},
		// Also: the new words were in place, and slurmctld, restarted before
		// it saved them, brings the old back (the soak, 2026-11-26): the
		// record kept the old (below), so the old words are ours.
		{name: "that drain failed: Slurm's is still ours, drain again",
			o:      observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(old)},
			action: actDrain, written: &drainRecord{Record: drain.Record{Reason: newWords, At: now}, replaced: pinned}},
		{name: "that drain failed, then uncordoned: ours, resumed",
			o:      observed{record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(old)},
			action: actResume, written: &drainRecord{resumed: pinned}},
		{name: "Slurm shows the new words: the old stays recorded, it may come back",
			o: observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(tried)}},
		{name: "Slurm shows the new words over a record without the old: the new record alone",
			o:       observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{Record: tried, resumed: old}, slurm: slurmShows(tried)},
			written: nil},
		{name: "the words went back: the old record alone",
			o:       observed{cordoned: true, cordonText: "PSU swap", record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(old)},
			written: &drainRecord{Record: old}},
		{name: "an admin's drain meanwhile: theirs, whatever onepool recorded",
			o:         observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(drain.Record{Reason: "bad ECC", At: now})},
			keptAdmin: true, written: &drainRecord{}},
		{name: "the admin used the old words later: theirs",
			o:       observed{record: drainRecord{Record: tried, replaced: old}, slurm: slurmShows(drain.Record{Reason: oldWords, At: now})},
			written: &drainRecord{}},
		// slurmctld restarted before saving its state brings back a drain
		// onepool had resumed, with its old reason and time.
		{name: "a drain we resumed comes back: resumed again",
			o:      observed{record: drainRecord{resumed: old}, slurm: slurmShows(old)},
			action: actResume, written: &drainRecord{resumed: pinned}},
		{name: "a drain we resumed, pinned, comes back: resumed again",
			o:      observed{record: drainRecord{resumed: pinned}, slurm: slurmShows(pinned)},
			action: actResume, written: &drainRecord{resumed: pinned}},
		{name: "a drain we resumed comes back while cordoned with new words: drained with them",
			o:      observed{cordoned: true, cordonText: "PSU and fan swap", record: drainRecord{resumed: old}, slurm: slurmShows(old)},
			action: actDrain, written: &drainRecord{Record: drain.Record{Reason: newWords, At: now}, replaced: pinned, resumed: old}},
		{name: "a drain we resumed comes back while cordoned with its words: ours in place",
			o:       observed{cordoned: true, cordonText: "PSU swap", record: drainRecord{resumed: old}, slurm: slurmShows(old)},
			written: &drainRecord{Record: old, resumed: old}},
		{name: "resumed and idle: nothing to write",
			o: observed{record: drainRecord{resumed: old}, slurm: slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE"}}}},
		{name: "an admin drains later with the words we resumed: theirs",
			o: observed{record: drainRecord{resumed: old}, slurm: slurmShows(drain.Record{Reason: oldWords, At: now})}},
		// Pinned records tell an admin's drain in onepool's words from
		// onepool's own within seconds (the soak, 2026-11-28: cordoned,
		// the pod deleted, then an admin's drain in the cordon's words 13 s
		// later, taken for onepool's and resumed).
		{name: "an admin drains with the words we resumed seconds later: theirs",
			o: observed{record: drainRecord{resumed: pinned}, slurm: slurmShows(drain.Record{Reason: oldWords, At: pinned.At.Add(10 * time.Second)})}},
		{name: "an admin drains with the words we replaced seconds later: theirs, and kept",
			o: observed{podGone: true, record: drainRecord{Record: drain.Record{Reason: deleted, At: pinned.At.Add(20 * time.Second)}, replaced: pinned},
				slurm: slurmShows(drain.Record{Reason: oldWords, At: pinned.At.Add(33 * time.Second)})},
			keptAdmin: true, written: &drainRecord{}},
		{name: "the same, the pod back and uncordoned: theirs, not resumed",
			o:       observed{record: drainRecord{replaced: pinned}, slurm: slurmShows(drain.Record{Reason: oldWords, At: pinned.At.Add(33 * time.Second)})},
			written: &drainRecord{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.now, tc.o.podReady = now, true
			d := plan(tc.o)
			if d.action != tc.action || d.keptAdmin != tc.keptAdmin {
				t.Errorf("action %v keptAdmin %v, want %v %v", d.action, d.keptAdmin, tc.action, tc.keptAdmin)
			}
			switch {
			case tc.written == nil && d.record != nil:
				t.Errorf("record written %+v, want it left", *d.record)
			case tc.written != nil && (d.record == nil || *d.record != *tc.written):
				t.Errorf("record written %+v, want %+v", d.record, *tc.written)
			}
		})
	}
}

func TestRegisterWait(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pod := func(age time.Duration) *corev1.Pod {
		p := &corev1.Pod{}
		p.CreationTimestamp.Time = now.Add(-age)
		return p
	}
	for _, tc := range []struct {
		age, want time.Duration
	}{
		{0, 2 * time.Minute},
		{90 * time.Second, 30 * time.Second},
		{2 * time.Minute, 0},
		{time.Hour, 0},
	} {
		if got := registerWait(pod(tc.age), now, 2*time.Minute); got != tc.want {
			t.Errorf("pod %s old: wait %s, want %s", tc.age, got, tc.want)
		}
	}
}
