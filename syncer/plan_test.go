package syncer

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

func TestPlan(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	idle := slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE"}}
	drainedBy := func(reason string) slurmrest.Node {
		return slurmrest.Node{Name: "gpu-3", State: slurmrest.NodeState{"IDLE", "DRAIN"}, Reason: reason, ReasonSetByUser: "root", ReasonChanged: now.Add(-time.Minute)}
	}
	for _, tc := range []struct {
		name       string
		o          observed
		action     slurmAction
		reason     string
		redrain    bool
		keptAdmin  bool
		badCordon  bool
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
		{name: "malformed words: drain anyway, flag it", o: observed{cordoned: true, cordonText: "a\nb", podReady: true, slurm: idle},
			action: actDrain, reason: "onepool: node cordoned", badCordon: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordoned and drained by us: nothing", o: observed{cordoned: true, podReady: true, applied: keys.ReasonCordoned, slurm: drainedBy(keys.ReasonCordoned)},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "uncordon resumes our drain", o: observed{podReady: true, applied: keys.ReasonCordoned, slurm: drainedBy(keys.ReasonCordoned)},
			action: actResume, condReason: keys.ConditionReasonAvailable},
		{name: "uncordon keeps an admin drain", o: observed{podReady: true, slurm: drainedBy("bad ECC")},
			condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "a NodeSet drain is the NodeSet's to resume", o: observed{podReady: true, slurm: drainedBy(keys.ReasonNodeSetUpdate)},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "a GPU health drain stays for the admin", o: observed{podReady: true, slurm: drainedBy(keys.ReasonGPUPrefix + "xid: 79")},
			condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordon over a NodeSet drain: it stays", o: observed{cordoned: true, podReady: true, slurm: drainedBy(keys.ReasonNodeSetUpdate)},
			keptAdmin: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "cordon over an admin drain: theirs stays", o: observed{cordoned: true, podReady: true, slurm: drainedBy("bad ECC")},
			keptAdmin: true, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "resumed in Slurm while cordoned: drain again", o: observed{cordoned: true, podReady: true, applied: keys.ReasonCordoned, slurm: idle},
			action: actDrain, reason: keys.ReasonCordoned, redrain: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "pod deleted: drain, then the pod may go", o: observed{podGone: true, slurm: idle},
			action: actDrain, reason: keys.ReasonPodDeleted, release: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "pod deleted on an admin-drained node: may go", o: observed{podGone: true, slurm: drainedBy("bad ECC")},
			keptAdmin: true, release: true, condReason: keys.ConditionReasonDrained, mirrored: true},
		{name: "cordoned, then pod deleted: reason follows", o: observed{podGone: true, cordoned: true, applied: keys.ReasonCordoned, slurm: drainedBy(keys.ReasonCordoned)},
			action: actDrain, reason: keys.ReasonPodDeleted, release: true, condReason: keys.ConditionReasonDrainedByOwner},
		{name: "not ready within grace: wait", o: observed{notReadyAt: now.Add(-20 * time.Second), grace: time.Minute, slurm: idle},
			recheck: 40 * time.Second, condReason: keys.ConditionReasonAvailable},
		{name: "not ready past grace: drain", o: observed{notReadyAt: now.Add(-2 * time.Minute), grace: time.Minute, slurm: idle},
			action: actDrain, reason: keys.ReasonPodNotReady, condReason: keys.ConditionReasonDrainedByOwner},
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
			if d.redrain != tc.redrain || d.keptAdmin != tc.keptAdmin || d.badCordon != tc.badCordon || d.releasePod != tc.release {
				t.Errorf("redrain %v keptAdmin %v badCordon %v release %v; want %v %v %v %v",
					d.redrain, d.keptAdmin, d.badCordon, d.releasePod, tc.redrain, tc.keptAdmin, tc.badCordon, tc.release)
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
