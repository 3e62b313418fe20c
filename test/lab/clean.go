package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
)

// Every test stage (each test binary: make e2e, the soak, the real-node
// suites, each benchmark) starts from the same lab state, whatever the
// stage before left: no Slurm job, no drained Slurm node, no cordoned
// Node. A stage that inherits a drain fails on it minutes later with a
// misleading message (CI, 2026-11-26: Slurm itself drained dyn-2 with
// "Duplicate jobid" at the short soak's last slurmctld kill, and the
// chart-mode NodeSet tests that needed dyn-2 idle failed after the soak).

// startCleanBound bounds the wait for the lab to settle clean.
const startCleanBound = 90 * time.Second

// nodeCleanPatch is the merge patch that uncordons a Node and removes
// onepool's drain annotations from it (every drain in Slurm is resumed
// too, so they describe nothing), and what it undoes; nil when the Node is
// clean. A record left on a Node by another stage, or by the other release
// a lab ran before (a lab keeps its etcd across releases), would otherwise
// make the syncer take an admin's drain with the same words for its own.
func nodeCleanPatch(cordoned bool, annotations map[string]string) ([]byte, string) {
	spec := map[string]any{}
	meta := map[string]any{}
	var what []string
	if cordoned {
		spec["unschedulable"] = nil
		what = append(what, "cordoned")
	}
	var stale []string
	for _, k := range keys.NodeDrainAnnotations() {
		if _, ok := annotations[k]; ok {
			meta[k] = nil
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		what = append(what, "with "+strings.Join(stale, ", "))
	}
	if len(what) == 0 {
		return nil, ""
	}
	p := map[string]any{}
	if len(spec) > 0 {
		p["spec"] = spec
	}
	if len(meta) > 0 {
		p["metadata"] = map[string]any{"annotations": meta}
	}
	b, _ := json.Marshal(p)
	return b, strings.Join(what, " ")
}

// DrainedNode is a Slurm node with the DRAIN flag, and why.
type DrainedNode struct{ Name, State, Reason string }

func (d DrainedNode) String() string { return fmt.Sprintf("%s (%s: %q)", d.Name, d.State, d.Reason) }

// DrainedNodes lists every Slurm node of the lab that is drained or
// draining, in name order.
func (l *Lab) DrainedNodes(ctx context.Context) ([]DrainedNode, error) {
	out, err := l.Slurm(ctx, "sinfo", "-h", "-N", "-o", "%N|%T|%E")
	if err != nil {
		return nil, fmt.Errorf("sinfo: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return parseDrained(string(out)), nil
}

// parseDrained reads `sinfo -h -N -o %N|%T|%E` (a node once per
// partition) into its drained nodes.
func parseDrained(out string) []DrainedNode {
	seen := map[string]bool{}
	var drained []DrainedNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 || seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		if strings.Contains(f[1], "drain") {
			drained = append(drained, DrainedNode{Name: f[0], State: f[1], Reason: f[2]})
		}
	}
	slices.SortFunc(drained, func(a, b DrainedNode) int { return strings.Compare(a.Name, b.Name) })
	return drained
}

// ScaleJobName names the scale benchmark's queue of another user's held
// jobs. A stage starts with them left in place: they never run, and
// 50,000 of them take minutes to queue again (and scancel of all of them
// outlasts its deadline).
const ScaleJobName = "onepool-scale-foreign"

// SlurmJobs lists the ids of every job in Slurm's queue but the scale
// benchmark's pending ones (ScaleJobName).
func (l *Lab) SlurmJobs(ctx context.Context) ([]string, error) {
	out, err := l.Slurm(ctx, "squeue", "-h", "-o", "%i %T %j")
	if err != nil {
		return nil, fmt.Errorf("squeue: %w: %s", err, strings.TrimSpace(string(out)))
	}
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || len(f) == 3 && f[1] == "PENDING" && f[2] == ScaleJobName {
			continue
		}
		ids = append(ids, f[0])
	}
	return ids, nil
}

// fewIDs names the first of many job ids, and how many more there are.
func fewIDs(ids []string) string {
	const shown = 20
	if len(ids) <= shown {
		return strings.Join(ids, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], " "), len(ids)-shown)
}

// ResumeDrained resumes every drained Slurm node of the lab and returns
// what it found.
func (l *Lab) ResumeDrained(ctx context.Context) ([]DrainedNode, error) {
	drained, err := l.DrainedNodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range drained {
		// A node that is no longer drained by now (error 2028) is done.
		_, _ = l.Slurm(ctx, "scontrol", "update", "nodename="+d.Name, "state=resume")
	}
	return drained, nil
}

// StartClean brings the running lab to the state every stage starts from
// and logs what it had to undo; with slurmOnly, Slurm alone (a Slurm-only
// lab has no Kubernetes). It fails, naming what stays, when the lab does
// not settle clean within startCleanBound.
func (l *Lab) StartClean(ctx context.Context, slurmOnly bool) error {
	var found []string
	if !slurmOnly {
		kc, err := l.KubeClient()
		if err != nil {
			return err
		}
		nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("stage start: list Nodes: %w", err)
		}
		for _, n := range nodes.Items {
			patch, what := nodeCleanPatch(n.Spec.Unschedulable, n.Annotations)
			if patch == nil {
				continue
			}
			found = append(found, "Node "+n.Name+" "+what)
			if _, err := kc.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("stage start: clear Node %s: %w", n.Name, err)
			}
		}
		// `make up`'s slurmd pods on the static nodes: the suites make
		// their own there.
		pods, err := kc.CoreV1().Pods(StaticSlurmdNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("stage start: list pods in %s: %w", StaticSlurmdNS, err)
		}
		if len(pods.Items) > 0 {
			found = append(found, fmt.Sprintf("%d slurmd pods of make up in %s", len(pods.Items), StaticSlurmdNS))
			if err := l.RemoveStaticSlurmdPods(ctx); err != nil {
				return fmt.Errorf("stage start: %w", err)
			}
		}
	}
	jobs, err := l.SlurmJobs(ctx)
	if err != nil {
		return fmt.Errorf("stage start: %w", err)
	}
	if len(jobs) > 0 {
		found = append(found, fmt.Sprintf("%d Slurm jobs (%s)", len(jobs), fewIDs(jobs)))
		if out, err := l.Slurm(ctx, append([]string{"scancel"}, jobs...)...); err != nil {
			return fmt.Errorf("stage start: scancel of %d jobs: %w: %.500s", len(jobs), err, out)
		}
	}
	if !slurmOnly {
		// A NodeSet of the stage before, deleted with its namespace, leaves
		// its nodes' Slurm records, with the CPUs and memory its pods had: a
		// new slurmd registering there keeps them (make test's NodeSet
		// tests after the 24.11 soak saw CPUTot=16 where their pods asked 6).
		stale, err := l.deleteUnservedDynRecords(ctx)
		if err != nil {
			return fmt.Errorf("stage start: %w", err)
		}
		for _, n := range stale {
			found = append(found, "dynamic Slurm node "+n+" with no slurmd pod")
		}
	}
	drained, err := l.ResumeDrained(ctx)
	if err != nil {
		return fmt.Errorf("stage start: %w", err)
	}
	for _, d := range drained {
		found = append(found, "drained "+d.String())
	}
	if len(found) == 0 {
		return nil
	}
	fmt.Fprintf(l.cfg.Log, "lab: the stage before left: %s; cleared\n", strings.Join(found, ", "))
	deadline := time.Now().Add(startCleanBound)
	for {
		jobs, jerr := l.SlurmJobs(ctx)
		drained, derr := l.DrainedNodes(ctx)
		if jerr == nil && derr == nil && len(jobs) == 0 && len(drained) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stage start: the lab is not clean %s after clearing what the stage before left (jobs %s %v; drained %v %v)",
				startCleanBound, fewIDs(jobs), jerr, drained, derr)
		}
		// A drain resumed while onepool still held a cause comes back; one
		// Slurm made comes back only while its cause holds.
		if len(drained) > 0 {
			_, _ = l.ResumeDrained(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// deleteUnservedDynRecords removes the dyn-* Slurm node records no live
// slurmd pod serves.
func (l *Lab) deleteUnservedDynRecords(ctx context.Context) ([]string, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return nil, err
	}
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: keys.LabelComponent + "=" + keys.ComponentSlurmd})
	if err != nil {
		return nil, fmt.Errorf("list slurmd pods: %w", err)
	}
	served := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			served[p.Spec.NodeName] = true
		}
	}
	return l.deleteDynRecordsBut(ctx, func(name string) bool { return served[name] })
}
