package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/test/lab"
)

// countsFromSinfo turns sinfo's states into the NodeSet's status counts.
func countsFromSinfo(states map[string]string) v1alpha1.SlurmCounts {
	var c v1alpha1.SlurmCounts
	for _, s := range states {
		s = strings.TrimRight(s, "*~#!%$@^-")
		switch {
		case strings.HasPrefix(s, "drain"):
			c.Drained++
		case strings.HasPrefix(s, "down"):
			c.Down++
		case s == "allocated" || s == "mixed" || s == "completing":
			c.Allocated++
		case s == "idle":
			c.Idle++
		}
	}
	return c
}

// waitStatusMatchesSinfo waits until the NodeSet's Slurm counts are what
// sinfo shows for its nodes, with the given number of Ready pods.
func (e *nodeSetEnv) waitStatusMatchesSinfo(nodes []string, ready int32, timeout time.Duration) *v1alpha1.NodeSet {
	e.t.Helper()
	var ns *v1alpha1.NodeSet
	eventually(e.t, timeout, "NodeSet status matches sinfo", func() (bool, string) {
		ns = e.get()
		want := countsFromSinfo(e.sinfo(nodes))
		got := ns.Status.Slurm
		return ns.Status.ReadyPods == ready && ns.Status.DesiredNodes == int32(len(nodes)) && got.Known &&
				got.Idle == want.Idle && got.Allocated == want.Allocated && got.Drained == want.Drained && got.Down == want.Down,
			fmt.Sprintf("status desired=%d ready=%d slurm=%+v; sinfo=%+v", ns.Status.DesiredNodes, ns.Status.ReadyPods, got, want)
	})
	return ns
}

func TestNodeSetSlurmdOnSelectedNodes(t *testing.T) {
	e := newNodeSetEnv(t, "h100")
	dyn := e.l.DynNodeNames()
	if len(dyn) < 5 {
		t.Fatalf("the lab has %d dynamic nodes; this test needs 5", len(dyn))
	}
	nodes := dyn[:4]
	for _, n := range nodes {
		e.labelNode(n, true)
	}
	ctx := context.Background()
	if err := e.c.Create(ctx, e.nodeSet(1)); err != nil {
		t.Fatal(err)
	}

	// Four pods, one per Node, and four Slurm nodes with 8 GPUs of the
	// type NVML names, on their first registration.
	e.waitRegistered(nodes, 90*time.Second)
	pods := e.pods()
	if len(pods) != 4 {
		t.Fatalf("want 4 slurmd pods, got %d", len(pods))
	}
	for _, n := range nodes {
		p, ok := pods[n]
		if !ok {
			t.Fatalf("no slurmd pod on %s", n)
		}
		if p.Annotations[keys.AnnotationSlurmNode] != n || p.Labels[keys.LabelComponent] != keys.ComponentSlurmd {
			t.Errorf("pod %s: annotations %v labels %v", p.Name, p.Annotations, p.Labels)
		}
		if kv := e.slurmNode(n); !strings.Contains(kv["Partitions"], dynPartition) || !strings.Contains(kv["AvailableFeatures"], dynFeature) {
			t.Errorf("%s: Partitions=%s AvailableFeatures=%s", n, kv["Partitions"], kv["AvailableFeatures"])
		}
	}
	e.waitStatusMatchesSinfo(nodes, 4, 30*time.Second)
	out := e.kubectl("get", "nodesets", "-n", nodeSetNS, e.name, "--no-headers")
	if f := strings.Fields(out); len(f) < 8 || strings.Join(f[1:8], " ") != "4 4 4 4 0 0 0" {
		t.Errorf("kubectl get nodesets: %q; want DESIRED READY UPDATED IDLE ALLOC DRAINED DOWN = 4 4 4 4 0 0 0", out)
	}
	if !lab.ChartMode() {
		// The same, as Prometheus sees it.
		url, sel := e.l.ControllerManagerMetricsURL(), fmt.Sprintf(`namespace="%s",nodeset="%s"`, nodeSetNS, e.name)
		waitSeries(t, e.l, url, `onepool_nodeset_members{`+sel+`,state="ready"}`, 4)
		waitSeries(t, e.l, url, `onepool_nodeset_slurm_nodes{`+sel+`,slurm_state="idle"}`, 4)
		waitSeries(t, e.l, url, `onepool_nodeset_slurm_known{`+sel+`}`, 1)
	}

	// A fifth matching Node becomes a fifth Slurm node.
	e.labelNode(dyn[4], true)
	nodes = dyn[:5]
	e.waitRegistered(nodes[4:], 60*time.Second)
	e.waitStatusMatchesSinfo(nodes, 5, 30*time.Second)
	// Slurm did not know the new nodes until their slurmd registered: no
	// warning says so while they were starting.
	e.noPodEvents(keys.EventSlurmUnavailable)

	// A Node that stops matching while a job runs there: the pod stays and
	// the Slurm node drains; it goes once the job ends.
	busy := dyn[1]
	job := e.sbatch(busy)
	e.waitStatusMatchesSinfo(nodes, 5, 30*time.Second)
	podBefore := e.pods()[busy]
	e.labelNode(busy, false)
	eventually(t, 30*time.Second, busy+" drains", func() (bool, string) {
		kv := e.slurmNode(busy)
		// scontrol appends " [user@time]" to the reason.
		return strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], drain.ReasonNodeSetLeft+" "+e.name+" ["), kv["State"] + " " + kv["Reason"]
	})
	hold := time.Now().Add(8 * time.Second)
	for time.Now().Before(hold) {
		p, ok := e.pods()[busy]
		if !ok || p.UID != podBefore.UID {
			t.Fatalf("the slurmd pod on %s went while job %s still runs", busy, job)
		}
		if st := e.slurmNode(busy)["State"]; !strings.Contains(st, "MIXED") && !strings.Contains(st, "ALLOCATED") {
			t.Fatalf("job %s no longer runs on %s (State=%s): nothing may cancel it", job, busy, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ns := e.get()
	if ns.Status.Slurm.Drained != 1 || ns.Status.DesiredNodes != 4 {
		t.Errorf("status while draining: desired %d, slurm %+v; want desired 4, drained 1", ns.Status.DesiredNodes, ns.Status.Slurm)
	}
	e.scancel(job)
	eventually(t, 60*time.Second, "pod and Slurm node of "+busy+" removed after the job ended", func() (bool, string) {
		_, pod := e.pods()[busy]
		kv := e.slurmNode(busy)
		return !pod && kv == nil, fmt.Sprintf("pod=%v slurm=%v", pod, kv["State"])
	})
	remaining := []string{dyn[0], dyn[2], dyn[3], dyn[4]}
	e.waitStatusMatchesSinfo(remaining, 4, 30*time.Second)
	e.wantEvents(keys.EventNodeDraining, keys.EventPodDeleted, keys.EventSlurmNodeRemoved)
}

func (e *nodeSetEnv) wantEvents(reasons ...string) {
	e.t.Helper()
	for _, r := range reasons {
		if ok, seen := soon(func() (bool, string) { return e.nodeSetHasEvent(r) }); !ok {
			e.t.Errorf("no %s event on NodeSet %s within 15 s (seen %s)", r, e.name, seen)
		}
	}
}

// nodeSetHasEvent says whether the NodeSet got an event with reason, and
// which reasons it got.
func (e *nodeSetEnv) nodeSetHasEvent(reason string) (bool, string) {
	var list corev1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(nodeSetNS)); err != nil {
		return false, err.Error()
	}
	seen := map[string]bool{}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "NodeSet" && ev.InvolvedObject.Name == e.name {
			seen[ev.Reason] = true
		}
	}
	return seen[reason], fmt.Sprint(seen)
}

func TestNodeSetRollingUpdateDrainsFirst(t *testing.T) {
	e := newNodeSetEnv(t, "roll")
	nodes := e.l.DynNodeNames()[:4]
	e.start(nodes, 1)
	ctx := context.Background()
	busy := nodes[2]
	job := e.sbatch(busy)
	busyPod := e.pods()[busy]

	// A new template: every pod is replaced, one node at a time, each only
	// after its Slurm node is drained and free.
	// The controller writes the NodeSet's status meanwhile: a read-modify-
	// write retries on a conflict, as kubectl edit users do.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns := e.get()
		ns.Spec.Template.Spec.Containers[0].Env = append(ns.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "E2E_TEMPLATE", Value: "v2"})
		return e.c.Update(ctx, ns)
	}); err != nil {
		t.Fatal(err)
	}
	maxOut, jobDone := 0, false
	// unavailable counts the nodes that are out of service for Slurm users
	// or Kubernetes: no Ready pod, or drained.
	unavailable := func() (int, string) {
		pods := e.pods()
		out, desc := 0, []string{}
		for _, n := range nodes {
			p, ok := pods[n]
			st := e.slurmNode(n)["State"]
			if !ok || !podReady(&p) || strings.Contains(st, "DRAIN") || st == "" {
				out++
				desc = append(desc, n+":"+st)
			}
		}
		return out, strings.Join(desc, " ")
	}
	updated := func(n string) bool {
		p, ok := e.pods()[n]
		return ok && p.Labels[keys.LabelTemplateHash] == e.get().Status.TemplateHash
	}
	deadline := time.Now().Add(150 * time.Second)
	for {
		out, desc := unavailable()
		if out > maxOut {
			maxOut = out
			t.Logf("%d unavailable: %s", out, desc)
		}
		if !jobDone {
			if p, ok := e.pods()[busy]; !ok || p.UID != busyPod.UID {
				t.Fatalf("the pod on busy node %s was replaced while job %s runs", busy, job)
			}
			others := 0
			for _, n := range nodes {
				if n != busy && updated(n) {
					others++
				}
			}
			st := e.slurmNode(busy)["State"]
			if others == 3 && strings.Contains(st, "DRAIN") {
				t.Logf("the three idle nodes are updated; %s waits drained (%s) for job %s", busy, st, job)
				e.scancel(job)
				jobDone = true
			}
		} else if out == 0 && updated(nodes[0]) && updated(nodes[1]) && updated(nodes[2]) && updated(nodes[3]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rolling update not done after 150 s (job cancelled: %v; unavailable: %s)", jobDone, desc)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if maxOut > 1 {
		t.Errorf("up to %d nodes were out at once; maxUnavailable is 1", maxOut)
	}
	e.waitRegistered(nodes, 30*time.Second)
	got := e.waitStatusMatchesSinfo(nodes, 4, 30*time.Second)
	if got.Status.UpdatedPods != 4 {
		t.Errorf("updatedPods = %d, want 4", got.Status.UpdatedPods)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// While slurmrestd is down the NodeSet takes nothing away (Slurm's state is
// unknown); when it is back, it converges on its own.
func TestNodeSetSlurmrestdDownConverges(t *testing.T) {
	e := newNodeSetEnv(t, "outage")
	nodes := e.l.DynNodeNames()[:2]
	e.start(nodes, 1)
	leaving := nodes[1]
	podBefore := e.pods()[leaving]

	end, writesReach := slurmUnknown(t, e.l)
	e.labelNode(leaving, false)
	eventually(t, 45*time.Second, "SlurmSynced=False", func() (bool, string) {
		c := meta.FindStatusCondition(e.get().Status.Conditions, keys.NodeSetSlurmSynced)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c)
	})
	// Its writes would reach Slurm (process mode): a drain or removal now
	// is one it made on a state it could not know.
	holds(t, 5*time.Second, "nothing taken away while Slurm's state is unknown", func() (bool, string) {
		if p, ok := e.pods()[leaving]; !ok || p.UID != podBefore.UID {
			return false, "the slurmd pod on " + leaving + " went"
		}
		if kv := e.slurmNode(leaving); writesReach && (kv == nil || strings.Contains(kv["State"], "DRAIN")) {
			return false, fmt.Sprintf("%s was drained or removed: %v", leaving, kv)
		}
		return true, ""
	})
	end()
	eventually(t, 60*time.Second, leaving+" drained, its pod and Slurm node removed", func() (bool, string) {
		_, pod := e.pods()[leaving]
		kv := e.slurmNode(leaving)
		return !pod && kv == nil, fmt.Sprintf("pod=%v slurm=%v", pod, kv["State"])
	})
	e.waitStatusMatchesSinfo(nodes[:1], 1, 30*time.Second)
}

// A pod whose node runs a job is labelled busy, and the NodeSet's
// PodDisruptionBudget refuses to evict it.
func TestNodeSetBusyPodNotEvicted(t *testing.T) {
	e := newNodeSetEnv(t, "busy")
	node := e.l.DynNodeNames()[0]
	e.start([]string{node}, 1)
	ctx := context.Background()
	t.Logf("%s registered at %s", node, time.Now().Format("15:04:05"))
	job := e.sbatch(node)
	t.Logf("job %s runs at %s", job, time.Now().Format("15:04:05"))
	var pod corev1.Pod
	eventually(t, 30*time.Second, "pod labelled busy", func() (bool, string) {
		pod = e.pods()[node]
		return pod.Labels[keys.LabelSlurmBusy] == "true", fmt.Sprintf("%v", pod.Labels)
	})
	var pdb policyv1.PodDisruptionBudget
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: nodeSetNS, Name: e.name + "-busy"}, &pdb); err != nil {
		t.Fatalf("the NodeSet's PodDisruptionBudget: %v", err)
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 0 || pdb.Spec.Selector.MatchLabels[keys.LabelSlurmBusy] != "true" {
		t.Fatalf("PodDisruptionBudget spec %+v: want maxUnavailable 0 over busy pods", pdb.Spec)
	}
	// kube-controller-manager's disruption controller publishes the
	// budget's status (no disruption allowed) before evictions read it.
	eventually(t, 30*time.Second, "the budget's status published", func() (bool, string) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: nodeSetNS, Name: e.name + "-busy"}, &pdb); err != nil {
			return false, err.Error()
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 0, fmt.Sprintf("%+v", pdb.Status)
	})
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
	err := e.c.SubResource("eviction").Create(ctx, &pod, ev)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting the busy slurmd pod: got %v, want 429 (PodDisruptionBudget)", err)
	}
	t.Logf("eviction refused at %s: %v", time.Now().Format("15:04:05"), err)
	e.scancel(job)
	// A job cancelled while its batch step launches can hold the node
	// (COMPLETING, busy) for Slurm's KillWait (30 s in the lab) before
	// slurmstepd kills it: make ci-fresh of df4307f saw the step end 29.8 s
	// after the cancel, and the label go with it. The label follows Slurm.
	eventually(t, 60*time.Second, "busy label removed after the job", func() (bool, string) {
		p := e.pods()[node]
		_, busy := p.Labels[keys.LabelSlurmBusy]
		return !busy, fmt.Sprintf("%v", p.Labels)
	})
}

// A Node deleted from Kubernetes (the machine decommissioned): its slurmd
// pod can never be stopped by a kubelet. The NodeSet drains the Slurm node,
// force-deletes the pod once nothing runs there, and removes the Slurm
// node, as an admin expects: no Terminating pod, no ghost in sinfo.
func TestNodeSetNodeDeletedLeavesNoGhost(t *testing.T) {
	e := newNodeSetEnv(t, "gone")
	node := e.l.DynNodeNames()[0]
	t.Cleanup(func() {
		if err := e.l.RestoreKubeNodes(context.Background()); err != nil {
			t.Errorf("restore the lab's Nodes: %v", err)
		}
	})
	e.labelNode(node, true)
	if err := e.c.Create(context.Background(), e.nodeSet(1)); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered([]string{node}, 90*time.Second)
	pod := e.pods()[node]
	if err := e.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "slurmd pod gone and Slurm node "+node+" removed", func() (bool, string) {
		var p corev1.Pod
		err := e.c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &p)
		kv := e.slurmNode(node)
		return apierrors.IsNotFound(err) && kv == nil, fmt.Sprintf("pod: %v (deleting %v); slurm: %s %s", err, p.DeletionTimestamp != nil, kv["State"], kv["Reason"])
	})
	e.wantEvents(keys.EventNodeDraining, keys.EventPodDeleted, keys.EventSlurmNodeRemoved)
}

// noPodEvents fails when one of the NodeSet's current pods got an event with reason.
func (e *nodeSetEnv) noPodEvents(reason string) {
	e.t.Helper()
	uids := map[string]string{}
	for _, p := range e.pods() {
		uids[string(p.UID)] = p.Name
	}
	var list corev1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(nodeSetNS)); err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range list.Items {
		if name, ok := uids[string(ev.InvolvedObject.UID)]; ok && ev.Reason == reason {
			e.t.Errorf("pod %s: %s event %q", name, reason, ev.Message)
		}
	}
}

// An admin's drain in the NodeSet's own words, on a node the NodeSet serves
// with a current, Ready pod: the NodeSet did not record it, so it stays.
func TestNodeSetKeepsAdminDrainInItsWords(t *testing.T) {
	e := newNodeSetEnv(t, "words")
	node := e.l.DynNodeNames()[2]
	e.labelNode(node, true)
	if err := e.c.Create(context.Background(), e.nodeSet(1)); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered([]string{node}, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if out, err := e.l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=drain", "reason="+drain.ReasonNodeSetUpdate); err != nil {
		t.Fatalf("scontrol drain: %v %s", err, out)
	}
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scontrol", "update", "nodename="+node, "state=resume") })
	end := time.Now().Add(6 * time.Second)
	for time.Now().Before(end) {
		if kv := e.slurmNode(node); !strings.Contains(kv["State"], "DRAIN") {
			t.Fatalf("the NodeSet resumed an admin's drain in its words: %s %s", kv["State"], kv["Reason"])
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// A slurmd pod that failed for good (the kubelet evicted it) is replaced
// like a DaemonSet's: a new pod on the same node, a FailedDaemonPod event
// on the NodeSet, the Slurm node back with its slurmd and not drained.
func TestNodeSetReplacesAFailedSlurmdPod(t *testing.T) {
	e := newNodeSetEnv(t, "failed")
	node := e.l.DynNodeNames()[0]
	e.start([]string{node}, 1)
	ctx, cancel := e.ctx()
	defer cancel()
	old := e.pods()[node]
	old.Status.Phase, old.Status.Reason, old.Status.Message = corev1.PodFailed, "Evicted", "e2e: the node was low on memory"
	if err := e.c.Status().Update(ctx, &old); err != nil {
		t.Fatalf("mark slurmd pod %s Failed: %v", old.Name, err)
	}
	t.Logf("pod %s marked Failed at %s", old.Name, time.Now().Format("15:04:05"))
	eventually(t, 60*time.Second, "a new Ready slurmd pod on "+node, func() (bool, string) {
		p, ok := e.pods()[node]
		return ok && p.UID != old.UID && podReady(&p), fmt.Sprintf("pod %s uid %s phase %s", p.Name, p.UID, p.Status.Phase)
	})
	e.waitRegistered([]string{node}, 60*time.Second)
	if kv := e.slurmNode(node); strings.Contains(kv["State"], "DRAIN") {
		t.Errorf("Slurm node %s after the replacement: %v, want not drained", node, kv["State"])
	}
	out := e.kubectl("get", "events", "-n", nodeSetNS, "--field-selector", "reason="+keys.EventPodFailed, "-o", "jsonpath={.items[*].message}")
	if !strings.Contains(out, old.Name) || !strings.Contains(out, "Evicted") {
		t.Errorf("events %s: %q, want one naming %s and why it failed", keys.EventPodFailed, out, old.Name)
	}
}

// A rolling update registers the new template in Slurm: a dynamic node's
// record is kept as it was when its slurmd registers again, so the
// NodeSet removes the record of a node it drained for the update once its
// old pod is gone, and the new pod's slurmd registers it afresh (before,
// CPUs=8 in the new template left CPUTot=16).
func TestNodeSetUpdateRegistersTheNewTemplate(t *testing.T) {
	e := newNodeSetEnv(t, "reregister")
	node := e.l.DynNodeNames()[1]
	e.start([]string{node}, 1)
	if got := e.slurmNode(node)["CPUTot"]; got != "16" {
		t.Fatalf("%s registered with CPUTot=%s, want the template's 16", node, got)
	}
	before := e.pods()[node].UID
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns := e.get()
		c := &ns.Spec.Template.Spec.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == keys.EnvSlurmCPUs {
				c.Env[i].Value = "8"
			}
		}
		return e.c.Update(context.Background(), ns)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, node+" back in Slurm from its new pod with the new template's CPUs", func() (bool, string) {
		p, ok := e.pods()[node]
		kv := e.slurmNode(node)
		return ok && p.UID != before && podReady(&p) && kv["CPUTot"] == "8" &&
				strings.HasPrefix(kv["State"], "IDLE") && !strings.Contains(kv["State"], "DRAIN"),
			fmt.Sprintf("new pod %v, State=%s CPUTot=%s", ok && p.UID != before, kv["State"], kv["CPUTot"])
	})
	e.waitRegistered([]string{node}, 30*time.Second)
}
