package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// Reconfiguring MIG on a NodeSet's node (issue 41): the Node asks another
// layout by onepool.dev/mig-config. The Slurm node is drained first; while
// a Slurm job runs on one of its MIG devices the slurmd pod stays and the
// layout is not handed to mig-manager. Once the job ends the pod goes, the
// NodeSet writes nvidia.com/mig.config (state pending); the test plays
// NVIDIA's mig-manager (the fake GPU's new layout, then success); the new
// pod's slurmd registers the node afresh with the new MIG devices (typed
// GRES and DRA devices) and the drain is resumed. An admin's hand-set
// nvidia.com/mig.config meanwhile is refused (the chart's policy).
func TestMIGLayoutChangeDrainsFirst(t *testing.T) {
	l := lab.Shared(t)
	dir, _ := fakeMIGNode(t, l) // first: its files go last
	node := l.DynNodeNames()[1]
	wipeSlicesAfter(t, l, node)
	ne := newNodeSetEnv(t, "migcfg")
	patchLabels := func(labels map[string]any) error {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		if err != nil {
			return err
		}
		ctx, cancel := ne.ctx()
		defer cancel()
		return ne.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, b))
	}
	setLabels := func(labels map[string]any) {
		t.Helper()
		if err := patchLabels(labels); err != nil {
			t.Fatalf("label Node %s: %v", node, err)
		}
	}
	nodeLabels := func() map[string]string {
		t.Helper()
		var n corev1.Node
		ctx, cancel := ne.ctx()
		defer cancel()
		if err := ne.c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	// Runs before the NodeSet's cleanup: the next test's NodeSet on this
	// Node must find no layout asked.
	// onepool's label first: while it is there, only the controller
	// manager writes nvidia.com/mig.config (the chart's mig-layout policy).
	t.Cleanup(func() {
		setLabels(map[string]any{keys.LabelMIGConfig: nil})
		setLabels(map[string]any{keys.LabelNVIDIAMIGConfig: nil, keys.LabelNVIDIAMIGConfigState: nil})
	})
	setLabels(map[string]any{keys.LabelNVIDIAMIGConfig: lab.FakeMIGMixed, keys.LabelNVIDIAMIGConfigState: keys.MIGConfigSuccess})
	ne.env = []corev1.EnvVar{{Name: "ONEPOOL_DRA", Value: "true"}}
	ne.args = []string{"--gpu-inventory", dir + "/inv.json", "--expected-gpus", "2"}
	ne.gres = "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:" + labGresType + ":1"
	ne.start([]string{node}, 1)
	nodeSlice(t, ne.c, node, 5)
	oldPod := ne.pods()[node]

	ctx := context.Background()
	out, err := ne.l.Slurm(ctx, "sbatch", "-p", dynPartition, "-w", node, "--gres=gpu:1g.10gb:1", "-J", "e2e-"+ne.name, "-o", "/dev/null", "--wrap", "sleep 600")
	m := jobIDRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("sbatch: %v %s", err, out)
	}
	job := m[1]
	eventually(t, time.Minute, "Slurm job "+job+" running", func() (bool, string) {
		out, _ := ne.l.Slurm(ctx, "squeue", "-h", "-j", job, "-o", "%T")
		return strings.TrimSpace(string(out)) == "RUNNING", string(out)
	})

	setLabels(map[string]any{keys.LabelMIGConfig: lab.FakeMIGAll1g})
	reason := drain.MIGConfigReason(lab.FakeMIGAll1g)
	eventually(t, time.Minute, node+" drained for the new layout", func() (bool, string) {
		kv := ne.slurmNode(node)
		// scontrol prints Reason=<words> [<user>@<time>].
		words, _, _ := strings.Cut(kv["Reason"], " [")
		return kv != nil && strings.Contains(kv["State"], "DRAIN") && words == reason, fmt.Sprintf("State=%s Reason=%s", kv["State"], kv["Reason"])
	})
	// An admin writing mig-manager's label by hand, past the drain, is refused.
	err = patchLabels(map[string]any{keys.LabelNVIDIAMIGConfig: lab.FakeMIGAll1g})
	if !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), "has its MIG layout kept by onepool") {
		t.Fatalf("a hand-set %s=%s on %s: %v, want refused by the chart's mig-layout policy", keys.LabelNVIDIAMIGConfig, lab.FakeMIGAll1g, node, err)
	}
	holds(t, 10*time.Second, "while the job runs: the pod stays, the layout is not handed to mig-manager", func() (bool, string) {
		p, ok := ne.pods()[node]
		l := nodeLabels()
		out, _ := ne.l.Slurm(ctx, "squeue", "-h", "-j", job, "-o", "%T")
		return ok && p.UID == oldPod.UID && l[keys.LabelNVIDIAMIGConfig] == lab.FakeMIGMixed && strings.TrimSpace(string(out)) == "RUNNING",
			fmt.Sprintf("pod there %v, %s=%s, job %s", ok, keys.LabelNVIDIAMIGConfig, l[keys.LabelNVIDIAMIGConfig], out)
	})

	ne.scancel(job)
	eventually(t, 2*time.Minute, "the job over: the pod gone, the layout handed over (pending)", func() (bool, string) {
		_, ok := ne.pods()[node]
		l := nodeLabels()
		return !ok && l[keys.LabelNVIDIAMIGConfig] == lab.FakeMIGAll1g && l[keys.LabelNVIDIAMIGConfigState] == keys.MIGConfigPending,
			fmt.Sprintf("pod there %v, labels %s=%s %s=%s", ok, keys.LabelNVIDIAMIGConfig, l[keys.LabelNVIDIAMIGConfig], keys.LabelNVIDIAMIGConfigState, l[keys.LabelNVIDIAMIGConfigState])
	})
	holds(t, 5*time.Second, "no slurmd pod while mig-manager works", func() (bool, string) {
		_, ok := ne.pods()[node]
		return !ok, fmt.Sprint(ok)
	})

	// mig-manager: the GPU's new layout, then success.
	if _, err := l.WriteFakeMIGNode(dir, lab.FakeMIGAll1g); err != nil {
		t.Fatal(err)
	}
	setLabels(map[string]any{keys.LabelNVIDIAMIGConfigState: keys.MIGConfigSuccess})
	ne.gres = "gpu:1g.10gb:7,gpu:" + labGresType + ":1"
	ne.waitRegistered([]string{node}, 2*time.Minute) // IDLE, not drained: resumed
	if p := ne.pods()[node]; p.UID == oldPod.UID {
		t.Fatalf("the slurmd pod %s was not replaced", p.Name)
	}
	devs := nodeSlice(t, ne.c, node, 8)
	n1g := 0
	for _, d := range devs {
		if d.gresType == "1g.10gb" {
			n1g++
		}
	}
	if n1g != 7 {
		t.Fatalf("the new ResourceSlice has %d 1g.10gb devices, want 7: %+v", n1g, devs)
	}
	t.Logf("%s: %s → %s, drained first, the job %s ended before the handover (%s)", node, lab.FakeMIGMixed, lab.FakeMIGAll1g, job, ne.l.Release().Name)
}
