package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

const syncerNS = "onepool-e2e"

// syncerEnv is one test's slurmd pod on one lab node.
type syncerEnv struct {
	t    *testing.T
	l    *lab.Lab
	kc   kubernetes.Interface
	node string
	pod  string
}

// newSyncerEnv puts a slurmd pod on node (owned by a NodeSet, as the
// NodeSet controller makes them: lab.HandSlurmdPod) and waits
// until the syncer has taken it in hand. Cleanup puts node back as found.
func newSyncerEnv(t *testing.T, node string) *syncerEnv {
	t.Helper()
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	e := &syncerEnv{t: t, l: l, kc: kc, node: node, pod: "slurmd-" + node}
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncerNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e.cleanup() // a previous run may have left it
	t.Cleanup(e.cleanup)
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := lab.EnsureHandNodeSet(ctx, c, syncerNS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods(syncerNS).Create(ctx, lab.HandSlurmdPod(owner, syncerNS, e.pod, node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "syncer adopts the slurmd pod", func() (bool, string) {
		p, err := kc.CoreV1().Pods(syncerNS).Get(ctx, e.pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		return ready && p.Annotations[keys.AnnotationSlurmNode] == node && len(p.Finalizers) > 0,
			fmt.Sprintf("ready=%v annotations=%v finalizers=%v", ready, p.Annotations, p.Finalizers)
	})
	return e
}

// cleanup deletes the pod, uncordons, and resumes a drain onepool made.
func (e *syncerEnv) cleanup() {
	ctx := context.Background()
	_ = e.kc.CoreV1().Pods(syncerNS).Delete(ctx, e.pod, metav1.DeleteOptions{})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := e.kc.CoreV1().Pods(syncerNS).Get(ctx, e.pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.kubectlQuiet("uncordon", e.node)
	e.kubectlQuiet("annotate", "node", e.node, keys.AnnotationCordonReason+"-", keys.AnnotationDrainApplied+"-", keys.AnnotationDrainAppliedAt+"-", keys.AnnotationDrainReplaced+"-", keys.AnnotationDrainResumed+"-")
	if kv := scontrolNode(e.t, e.l, e.node); strings.Contains(kv["State"], "DRAIN") {
		_, _ = e.l.Slurm(ctx, "scontrol", "update", "nodename="+e.node, "state=resume")
	}
}

func (e *syncerEnv) kubectl(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(e.l.Kubectl(), append([]string{"--kubeconfig", e.l.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (e *syncerEnv) kubectlQuiet(args ...string) {
	_ = exec.Command(e.l.Kubectl(), append([]string{"--kubeconfig", e.l.Kubeconfig()}, args...)...).Run()
}

func (e *syncerEnv) scontrol(args ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if out, err := e.l.Slurm(ctx, append([]string{"scontrol"}, args...)...); err != nil {
		e.t.Fatalf("scontrol %v: %v %s", args, err, out)
	}
}

// waitSlurm waits until scontrol shows the node drained with a reason that
// starts with reason (drained), or not drained (reason "").
func (e *syncerEnv) waitSlurm(timeout time.Duration, drained bool, reason string) {
	e.t.Helper()
	eventually(e.t, timeout, fmt.Sprintf("Slurm node %s drained=%v reason=%q", e.node, drained, reason), func() (bool, string) {
		kv := scontrolNode(e.t, e.l, e.node)
		isDrained := strings.Contains(kv["State"], "DRAIN")
		if drained {
			return isDrained && strings.HasPrefix(kv["Reason"], reason), kv["State"] + " " + kv["Reason"]
		}
		return !isDrained, kv["State"] + " " + kv["Reason"]
	})
}

// holds checks that cond stays true for d.
func (e *syncerEnv) holds(d time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	holds(e.t, d, what, cond)
}

func (e *syncerEnv) getNode() *corev1.Node {
	e.t.Helper()
	n, err := e.kc.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *syncerEnv) getPod() *corev1.Pod {
	e.t.Helper()
	p, err := e.kc.CoreV1().Pods(syncerNS).Get(context.Background(), e.pod, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *syncerEnv) condition() *corev1.NodeCondition {
	for _, c := range e.getNode().Status.Conditions {
		if c.Type == keys.ConditionSlurmUnavailable {
			return &c
		}
	}
	return nil
}

// hasEvent says whether the syncer recorded an event with reason about obj.
func (e *syncerEnv) hasEvent(namespace, obj, reason string) (bool, string) {
	evs, err := e.kc.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + obj + ",reason=" + reason,
	})
	if err != nil {
		return false, err.Error()
	}
	var msgs []string
	for _, ev := range evs.Items {
		msgs = append(msgs, ev.Message)
	}
	return len(evs.Items) > 0, strings.Join(msgs, "; ")
}

func TestSyncerCordonDrainsUncordonResumes(t *testing.T) {
	e := newSyncerEnv(t, "gpu-0")
	e.kubectl("annotate", "--overwrite", "node", e.node, keys.AnnotationCordonReason+"=e2e maintenance")
	e.kubectl("cordon", e.node)
	e.waitSlurm(10*time.Second, true, "onepool: node cordoned: e2e maintenance")
	out, err := e.l.Slurm(context.Background(), "sinfo", "-R", "-h", "-n", e.node, "-o", "%E")
	if err != nil || !strings.Contains(string(out), "onepool: node cordoned: e2e maintenance") {
		t.Errorf("sinfo -R: %q, %v", out, err)
	}
	eventually(t, 10*time.Second, "Drained event on the Node", func() (bool, string) { return e.hasEvent("default", e.node, keys.EventDrained) })
	// The event comes after the Node says so: whoever reads it finds the condition set.
	if c := e.condition(); c == nil || c.Status != corev1.ConditionTrue || c.Reason != keys.ConditionReasonDrainedByOwner {
		t.Errorf("condition when the Drained event is there: %+v", c)
	}
	e.kubectl("uncordon", e.node)
	e.waitSlurm(10*time.Second, false, "")
	eventually(t, 10*time.Second, "condition False", func() (bool, string) {
		c := e.condition()
		return c != nil && c.Status == corev1.ConditionFalse, fmt.Sprintf("%+v", c)
	})
}

func TestSyncerAdminDrainMirroredAndKept(t *testing.T) {
	e := newSyncerEnv(t, "gpu-1")
	e.scontrol("update", "nodename="+e.node, "state=drain", "reason=bad ECC")
	eventually(t, 10*time.Second, "annotations and condition from Slurm", func() (bool, string) {
		p, n, c := e.getPod(), e.getNode(), e.condition()
		ok := p.Annotations[keys.AnnotationSlurmReason] == "bad ECC" && n.Annotations[keys.AnnotationSlurmReason] == "bad ECC" &&
			strings.Contains(n.Annotations[keys.AnnotationSlurmState], "DRAIN") && n.Annotations[keys.AnnotationSlurmSince] != "" &&
			c != nil && c.Status == corev1.ConditionTrue && c.Reason == keys.ConditionReasonDrained && c.Message == "bad ECC"
		return ok, fmt.Sprintf("pod %v node %v condition %+v", p.Annotations, n.Annotations, c)
	})
	if out := e.kubectl("describe", "node", e.node); !strings.Contains(out, "bad ECC") {
		t.Errorf("kubectl describe node does not say why:\n%s", out)
	}
	// Cordon and uncordon: onepool never undoes the admin's drain.
	e.kubectl("cordon", e.node)
	e.holds(3*time.Second, "admin drain with its reason", func() (bool, string) {
		kv := scontrolNode(t, e.l, e.node)
		return strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], "bad ECC"), kv["State"] + " " + kv["Reason"]
	})
	e.kubectl("uncordon", e.node)
	e.holds(3*time.Second, "admin drain after uncordon", func() (bool, string) {
		kv := scontrolNode(t, e.l, e.node)
		return strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], "bad ECC"), kv["State"] + " " + kv["Reason"]
	})
	// The admin resumes: the Kubernetes side clears.
	e.scontrol("update", "nodename="+e.node, "state=resume")
	eventually(t, 10*time.Second, "annotations gone, condition False", func() (bool, string) {
		p, n, c := e.getPod(), e.getNode(), e.condition()
		_, pa := p.Annotations[keys.AnnotationSlurmReason]
		_, na := n.Annotations[keys.AnnotationSlurmReason]
		return !pa && !na && c != nil && c.Status == corev1.ConditionFalse, fmt.Sprintf("pod %v node %v condition %+v", p.Annotations, n.Annotations, c)
	})
}

func TestSyncerRedrainsWhenResumedInSlurmWhileCordoned(t *testing.T) {
	e := newSyncerEnv(t, "gpu-2")
	e.kubectl("cordon", e.node)
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned)
	// The scenario: onepool's drain is in place and recorded on the Node,
	// then an admin resumes the node in Slurm.
	eventually(t, 10*time.Second, "drain recorded on the Node", func() (bool, string) {
		a := e.getNode().Annotations
		return a[keys.AnnotationDrainApplied] == drain.ReasonCordoned && a[keys.AnnotationDrainAppliedAt] != "", fmt.Sprint(a)
	})
	e.scontrol("update", "nodename="+e.node, "state=resume")
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned)
	eventually(t, 10*time.Second, "Redrained warning event", func() (bool, string) { return e.hasEvent("default", e.node, keys.EventRedrained) })
	e.kubectl("uncordon", e.node)
	e.waitSlurm(10*time.Second, false, "")
}

func TestSyncerDeletedPodDrainsBeforeItGoes(t *testing.T) {
	e := newSyncerEnv(t, "gpu-2")
	if err := e.kc.CoreV1().Pods(syncerNS).Delete(context.Background(), e.pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSlurm(10*time.Second, true, drain.ReasonPodDeleted)
	eventually(t, 15*time.Second, "pod gone once drained", func() (bool, string) {
		_, err := e.kc.CoreV1().Pods(syncerNS).Get(context.Background(), e.pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestSyncerSlurmrestdDownWhileCordoning(t *testing.T) {
	e := newSyncerEnv(t, "gpu-3")
	if err := e.l.StopSlurmrestd(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.l.StartSlurmrestd(context.Background()) })
	e.kubectl("cordon", e.node)
	e.holds(2*time.Second, "no drain while slurmrestd is down", func() (bool, string) {
		kv := scontrolNode(t, e.l, e.node)
		return !strings.Contains(kv["State"], "DRAIN"), kv["State"]
	})
	if err := e.l.StartSlurmrestd(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitSlurm(30*time.Second, true, drain.ReasonCordoned)
}

func TestSyncerKilledAndRestartedConverges(t *testing.T) {
	e := newSyncerEnv(t, "gpu-3")
	t.Cleanup(func() { _ = e.l.StartControllerManager(context.Background()) })
	if err := e.l.KillControllerManager(); err != nil {
		t.Fatal(err)
	}
	e.kubectl("cordon", e.node)
	if err := e.l.StartControllerManager(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitSlurm(30*time.Second, true, drain.ReasonCordoned)
	if err := e.l.KillControllerManager(); err != nil {
		t.Fatal(err)
	}
	e.kubectl("uncordon", e.node)
	if err := e.l.StartControllerManager(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitSlurm(30*time.Second, false, "")
}

func TestSyncerMalformedReasonAnnotation(t *testing.T) {
	e := newSyncerEnv(t, "gpu-0")
	start := time.Now()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{keys.AnnotationCordonReason: "line one\nline two"}}})
	e.kubectl("patch", "node", e.node, "--type=merge", "-p", string(patch))
	e.kubectl("cordon", e.node)
	// The operator's words reach Slurm, the line break as a space.
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned+": line one line two")
	e.oneWarning(start, keys.EventBadAnnotation, "control characters replaced by spaces", `"onepool: node cordoned: line one line two"`)
	if err := e.l.StartControllerManager(context.Background()); err != nil { // still up and ready: no crash
		t.Fatalf("controller manager after a malformed annotation: %v", err)
	}
}

func TestSyncerLongCordonReasonIsCut(t *testing.T) {
	e := newSyncerEnv(t, "gpu-3")
	start := time.Now()
	words := "replace the PSU and both risers; ticket " + strings.Repeat("é", 200)
	e.kubectl("annotate", "--overwrite", "node", e.node, keys.AnnotationCordonReason+"="+words)
	e.kubectl("cordon", e.node)
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned+": replace the PSU and both risers; ticket éé")
	kv := scontrolNode(t, e.l, e.node)
	if !strings.HasSuffix(kv["Reason"], drain.TruncatedMark) && !strings.Contains(kv["Reason"], drain.TruncatedMark+" [") {
		t.Errorf("the cut is not marked: %q", kv["Reason"])
	}
	e.oneWarning(start, keys.EventBadAnnotation, "cut to 200 bytes", "replace the PSU and both risers")
}

// oneWarning waits for exactly one event with reason on the Node since
// start whose message holds every part, and checks no second one follows.
func (e *syncerEnv) oneWarning(start time.Time, reason string, parts ...string) {
	e.t.Helper()
	events := func() (bool, string) {
		evs, err := e.kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + e.node + ",reason=" + reason,
		})
		if err != nil {
			return false, err.Error()
		}
		var mine []corev1.Event
		for _, ev := range evs.Items {
			// events.k8s.io events carry eventTime (and a series when
			// repeated); core/v1 ones firstTimestamp (and a count).
			at := ev.FirstTimestamp.Time
			if !ev.EventTime.IsZero() {
				at = ev.EventTime.Time
			}
			if !at.Before(start.Truncate(time.Second)) {
				mine = append(mine, ev)
			}
		}
		if len(mine) != 1 || mine[0].Count > 1 || (mine[0].Series != nil && mine[0].Series.Count > 1) {
			return false, fmt.Sprintf("%d events: %+v", len(mine), mine)
		}
		for _, p := range parts {
			if !strings.Contains(mine[0].Message, p) {
				return false, fmt.Sprintf("message %q lacks %q", mine[0].Message, p)
			}
		}
		return true, ""
	}
	eventually(e.t, 10*time.Second, reason+" event", events)
	e.holds(3*time.Second, "a single "+reason+" event with the words Slurm got", events)
}

// An admin's drain is the admin's whatever its words: one that looks like
// onepool's is neither resumed nor shown as onepool's.
func TestSyncerAdminDrainThatLooksLikeOnepools(t *testing.T) {
	e := newSyncerEnv(t, "gpu-1")
	for _, reason := range []string{"onepool: node cordoned by admin alice", drain.ReasonPodNotReady, drain.ReasonNodeSetUpdate, "onepool: maintenance by admin"} {
		e.scontrol("update", "nodename="+e.node, "state=drain", "reason="+reason)
		eventually(t, 10*time.Second, "admin drain "+reason+" mirrored as the admin's", func() (bool, string) {
			n, c := e.getNode(), e.condition()
			return n.Annotations[keys.AnnotationSlurmReason] == reason && c != nil && c.Status == corev1.ConditionTrue && c.Reason == keys.ConditionReasonDrained,
				fmt.Sprintf("node %v condition %+v", n.Annotations, c)
		})
		e.holds(3*time.Second, "admin drain "+reason+" kept", func() (bool, string) {
			kv := scontrolNode(t, e.l, e.node)
			return strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], reason), kv["State"] + " " + kv["Reason"]
		})
		e.scontrol("update", "nodename="+e.node, "state=resume")
		e.waitSlurm(10*time.Second, false, "")
	}
}

// An admin who drains with onepool's very words seconds after onepool
// resumed or replaced its own drain in those words made a drain of their
// own: onepool's records are pinned to Slurm's time for its drain, and the
// admin's is kept (the 24.11 short soak, 2026-11-28: cordoned, the words
// replaced, an admin's drain in the old words 13 s later taken for
// onepool's and resumed).
func TestSyncerAdminDrainInWordsOnepoolJustLeft(t *testing.T) {
	e := newSyncerEnv(t, "gpu-2")
	kept := func(what, reason string) {
		e.t.Helper()
		eventually(t, 10*time.Second, what+": mirrored as the admin's", func() (bool, string) {
			n, c := e.getNode(), e.condition()
			return n.Annotations[keys.AnnotationSlurmReason] == reason && c != nil && c.Reason == keys.ConditionReasonDrained,
				fmt.Sprintf("node %v condition %+v", n.Annotations, c)
		})
		e.holds(5*time.Second, what+": kept", func() (bool, string) {
			kv := scontrolNode(t, e.l, e.node)
			words, _, _ := strings.Cut(kv["Reason"], " [") // scontrol adds " [user@time]"
			return strings.Contains(kv["State"], "DRAIN") && words == reason, kv["State"] + " " + kv["Reason"]
		})
	}
	// Resumed: cordon, uncordon, then the admin in the cordon's words.
	e.kubectl("cordon", e.node)
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned)
	e.kubectl("uncordon", e.node)
	e.waitSlurm(10*time.Second, false, "")
	eventually(t, 10*time.Second, "the resumed drain recorded, pinned to Slurm's time", func() (bool, string) {
		r := drain.Parse(e.getNode().Annotations[keys.AnnotationDrainResumed])
		return r.Reason == drain.ReasonCordoned && r.Exact, fmt.Sprintf("%+v", r)
	})
	time.Sleep(time.Second) // Slurm's reason time has whole seconds
	e.scontrol("update", "nodename="+e.node, "state=drain", "reason="+drain.ReasonCordoned)
	kept("drained in the words onepool resumed", drain.ReasonCordoned)
	e.scontrol("update", "nodename="+e.node, "state=resume")
	e.waitSlurm(10*time.Second, false, "")

	// Replaced: cordoned with words, the words changed, then the admin in
	// the old words; the uncordon leaves the admin's drain.
	old := drain.ReasonCordoned + ": e2e swap A"
	e.kubectl("annotate", "--overwrite", "node", e.node, keys.AnnotationCordonReason+"=e2e swap A")
	e.kubectl("cordon", e.node)
	e.waitSlurm(10*time.Second, true, old)
	e.kubectl("annotate", "--overwrite", "node", e.node, keys.AnnotationCordonReason+"=e2e swap B")
	e.waitSlurm(10*time.Second, true, drain.ReasonCordoned+": e2e swap B")
	eventually(t, 10*time.Second, "the replaced drain recorded, pinned to Slurm's time", func() (bool, string) {
		r := drain.Parse(e.getNode().Annotations[keys.AnnotationDrainReplaced])
		return r.Reason == old && r.Exact, fmt.Sprintf("%+v", r)
	})
	time.Sleep(time.Second)
	e.scontrol("update", "nodename="+e.node, "state=drain", "reason="+old)
	kept("drained in the words onepool replaced", old)
	e.kubectl("uncordon", e.node)
	kept("uncordoned", old)
}

func TestSyncerNoActionWhileStale(t *testing.T) {
	e := newSyncerEnv(t, "gpu-1")
	e.scontrol("update", "nodename="+e.node, "state=drain", "reason=admin work")
	// Mirrored in full, the condition too (written after the annotations):
	// once Slurm's state is unknown the syncer writes nothing more, so a
	// condition not yet written then would never come (ci-fresh of 45392ef).
	eventually(t, 10*time.Second, "admin drain mirrored", func() (bool, string) {
		n, c := e.getNode(), e.condition()
		return n.Annotations[keys.AnnotationSlurmReason] == "admin work" && c != nil && c.Status == corev1.ConditionTrue,
			fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	end, writesReach := slurmUnknown(t, e.l)
	// Stale after lab.StaleAfter; then the admin resumes and the operator cordons.
	time.Sleep(lab.StaleAfter + 2*time.Second)
	e.scontrol("update", "nodename="+e.node, "state=resume")
	e.kubectl("cordon", e.node)
	e.holds(4*time.Second, "Kubernetes side unchanged while Slurm's state is unknown", func() (bool, string) {
		n, c := e.getNode(), e.condition()
		return n.Annotations[keys.AnnotationSlurmReason] == "admin work" && c != nil && c.Status == corev1.ConditionTrue,
			fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	// The syncer's writes would reach Slurm (process mode): a drain now
	// is one it made on a state it could not know.
	if kv := scontrolNode(t, e.l, e.node); writesReach && strings.Contains(kv["State"], "DRAIN") {
		t.Errorf("Slurm changed while the syncer could not know its state: %s %s", kv["State"], kv["Reason"])
	}
	end()
	// Known again: the cordon drains, the admin's reason is gone from the mirror.
	e.waitSlurm(20*time.Second, true, drain.ReasonCordoned)
	eventually(t, 10*time.Second, "mirror cleared", func() (bool, string) {
		_, ok := e.getNode().Annotations[keys.AnnotationSlurmReason]
		return !ok, fmt.Sprint(e.getNode().Annotations)
	})
}
