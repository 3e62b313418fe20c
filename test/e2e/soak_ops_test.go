package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// Operations the soak does at random: what users and admins do on both
// sides. Each may fail while a fault holds; a failure is logged, never a
// violation (only what the system does with it counts).

// soakOp is one kind of operation and its weight in the draw.
type soakOp struct {
	name   string
	weight int
	do     func(ctx context.Context) error
}

func (s *soak) operations() []soakOp {
	return append([]soakOp{
		{"cordon", 12, s.opCordon},
		{"uncordon", 12, s.opUncordon},
		{"admin drain", 6, s.opAdminDrain},
		{"admin resume", 6, s.opAdminResume},
		{"onepool pod created", 14, s.opCreatePod},
		{"onepool pod with a GPU claim created", 8, s.opCreateClaimPod},
		{"onepool pod deleted", 12, s.opDeletePod},
		{"slurm job submitted", 12, s.opSubmit},
		{"slurm job cancelled", 4, s.opCancel},
		{"node relabelled", 4, s.opRelabel},
	}, s.nodeSetOps()...)
}

func pick[T any](s *soak, items []T, weight func(T) int) T {
	total := 0
	for _, it := range items {
		total += weight(it)
	}
	n := s.rng.IntN(total)
	for _, it := range items {
		if n -= weight(it); n < 0 {
			return it
		}
	}
	return items[len(items)-1]
}

func (s *soak) node() string {
	names := s.l.NodeNames()
	return names[s.rng.IntN(len(names))]
}

// op does one random operation.
func (s *soak) op() {
	o := pick(s, s.operations(), func(o soakOp) int { return o.weight })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s.setStep("op " + o.name)
	if err := o.do(ctx); err != nil {
		s.t.Logf("soak step %d: %s failed (a fault may hold): %v", s.step, o.name, err)
	}
	s.mu.Lock()
	s.ops++
	s.mu.Unlock()
}

// cordonWords are an operator's words, some awkward: empty, control
// characters, too long, or onepool's own reason typed by hand.
func (s *soak) cordonWords() string {
	switch s.rng.IntN(6) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("rma ticket %d\nsecond line", s.step)
	case 2:
		return strings.Repeat("x", 250)
	case 3:
		return drain.ReasonCordoned
	default:
		return fmt.Sprintf("soak step %d: maintenance", s.step)
	}
}

func (s *soak) opCordon(ctx context.Context) error {
	return s.setCordon(ctx, s.node(), true, s.cordonWords())
}

func (s *soak) opUncordon(ctx context.Context) error { return s.setCordon(ctx, s.node(), false, "") }

// setCordon cordons a Node with the operator's words (the annotation
// onepool reads), or uncordons it, as kubectl cordon/uncordon would.
func (s *soak) setCordon(ctx context.Context, node string, on bool, words string) error {
	var reason any
	if on {
		reason = words
	}
	patch, _ := json.Marshal(map[string]any{
		"spec":     map[string]any{"unschedulable": on},
		"metadata": map[string]any{"annotations": map[string]any{keys.AnnotationCordonReason: reason}},
	})
	_, err := s.kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// adminReason is an admin's drain reason; some look like onepool's.
func (s *soak) adminReason() string {
	switch s.rng.IntN(4) {
	case 0:
		return drain.ReasonCordoned
	case 1:
		return drain.ReasonPodNotReady
	default:
		return fmt.Sprintf("soak admin step %d: bad DIMM", s.step)
	}
}

func (s *soak) opAdminDrain(ctx context.Context) error {
	n := s.node()
	reason := s.adminReason()
	return s.admin(ctx, n, reason, "state=drain", "reason="+reason)
}

func (s *soak) opAdminResume(ctx context.Context) error {
	s.mu.Lock()
	var drained []string
	for n := range s.adminDrain {
		drained = append(drained, n)
	}
	s.mu.Unlock()
	if len(drained) == 0 {
		return nil
	}
	return s.admin(ctx, drained[s.rng.IntN(len(drained))], "", "state=resume")
}

// drainTaken says whether Slurm took the admin's drain as a new one: the
// node drained with reason, its reason time not before sent; and that
// time. A node that cannot be read counts as taken (the admin checks then
// judge it), with no time.
func (s *soak) drainTaken(ctx context.Context, node, reason string, sent time.Time) (bool, time.Time) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	n, err := s.sc.GetNode(cctx, node)
	if err != nil || !n.State.Drain() || n.Reason != reason || n.ReasonChanged.IsZero() {
		return true, time.Time{}
	}
	return !n.ReasonChanged.Before(sent), n.ReasonChanged
}

// onepoolsLookalike says whether the admin's drain, in onepool's own words
// and set at changed, is one onepool takes for its own by design: a record
// of onepool's on the Node has those words, within drain.RecordSlack of
// changed (drain/README.md: Slurm's text and time are all there is to
// compare). False when changed is unknown or the Node cannot be read.
func (s *soak) onepoolsLookalike(ctx context.Context, node, reason string, changed time.Time) bool {
	if changed.IsZero() || drain.Form(reason) == drain.Admin {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	n, err := s.kc.CoreV1().Nodes().Get(cctx, node, metav1.GetOptions{})
	if err != nil {
		return false
	}
	owner, _ := drain.RecordsIn(n.Annotations).Owner(true, reason, changed)
	return owner.Onepool()
}

// admin runs `scontrol update nodename=N args` as an admin would, again
// until Slurm takes it (slurmctld may be down), and records the node's
// admin drain (reason "" for a resume). A node the soak could not bring to
// a known state is left out of the admin checks from then on.
func (s *soak) admin(ctx context.Context, node, reason string, args ...string) error {
	s.mu.Lock()
	s.inflight[node] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.inflight, node)
		s.version++
		s.mu.Unlock()
	}()
	var err error
	var sent time.Time
	for attempt := 0; attempt < 6; attempt++ {
		sent = time.Now().Truncate(time.Second) // Slurm's reason time has whole seconds
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		var out []byte
		out, err = s.l.Slurm(cctx, append([]string{"scontrol", "update", "nodename=" + node}, args...)...)
		cancel()
		if err == nil {
			break
		}
		err = fmt.Errorf("scontrol update %s %v: %w: %s", node, args, err, strings.TrimSpace(string(out)))
		if reason == "" && strings.Contains(string(out), "Invalid node state") {
			err = nil // resumed already (not drained any more)
			break
		}
		time.Sleep(5 * time.Second)
	}
	noop, lookalike := false, false
	if err == nil && reason != "" {
		taken, changed := s.drainTaken(ctx, node, reason, sent)
		noop = !taken
		lookalike = taken && s.onepoolsLookalike(ctx, node, reason, changed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.uncertain[node] = true
		delete(s.adminDrain, node)
		return err
	}
	if noop || lookalike {
		// noop: the node was drained already with these very words
		// (onepool's cordon drain, say): Slurm keeps that drain and its
		// time, so nothing in Slurm says an admin made it, and onepool
		// rightly resumes its own drain. lookalike: the admin typed
		// onepool's words within a minute of onepool's own drain of the
		// node with those words: nothing tells the two apart, and onepool
		// takes it for its own. A waiver, and the node leaves the admin
		// checks until the admin acts on it again.
		why := "changed nothing in Slurm (the same drain was there)"
		if lookalike {
			why = fmt.Sprintf("is within %s of onepool's own record of those words", drain.RecordSlack)
		}
		s.waivers++
		s.uncertain[node] = true
		delete(s.adminDrain, node)
		s.t.Logf("soak: waiver: the admin's drain of %s with %q %s", node, reason, why)
		return nil
	}
	delete(s.uncertain, node)
	s.adminAt[node] = time.Now()
	if reason == "" {
		delete(s.adminDrain, node)
	} else {
		s.adminDrain[node] = reason
	}
	return nil
}

// soakPod is a onepool pod asking gpus GPUs in a random QOS.
func (s *soak) soakPod(gpus int64) *corev1.Pod {
	ann := map[string]string{}
	if q := []string{"", lab.QOSLow, lab.QOSNormal, lab.QOSHigh}[s.rng.IntN(4)]; q != "" {
		ann[keys.AnnotationJobQOS] = q
	}
	grace := int64(s.rng.IntN(5))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("infer-%d", s.step), Namespace: s.ns, Annotations: ann, Labels: map[string]string{"soak": "infer"}},
		Spec: corev1.PodSpec{
			SchedulerName:                 keys.SchedulerName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "infer", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
			}}},
		},
	}
}

// inferPods are the soak's onepool pods, in both its namespaces.
func (s *soak) inferPods(ctx context.Context) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, ns := range []string{s.ns, s.claimsNS()} {
		l, err := s.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "soak=infer"})
		if err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
	}
	return out, nil
}

func (s *soak) opCreatePod(ctx context.Context) error {
	pods, err := s.inferPods(ctx)
	if err != nil {
		return err
	}
	if len(pods) >= soakMaxPods {
		return s.opDeletePod(ctx)
	}
	_, err = s.kc.CoreV1().Pods(s.ns).Create(ctx, s.soakPod([]int64{1, 1, 2, 4, 8}[s.rng.IntN(5)]), metav1.CreateOptions{})
	return err
}

func (s *soak) opDeletePod(ctx context.Context) error {
	pods, err := s.inferPods(ctx)
	if err != nil {
		return err
	}
	var live []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	p := live[s.rng.IntN(len(live))]
	s.mu.Lock()
	s.ourDeletes[p.UID] = true
	s.mu.Unlock()
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
	if s.rng.IntN(2) == 0 {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	return s.kc.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, opts)
}

// opSubmit submits an ordinary Slurm job in a random QOS: high preempts
// onepool's pods in normal and low, and theirs preempt it back the same way.
func (s *soak) opSubmit(ctx context.Context) error {
	s.mu.Lock()
	n := len(s.jobs)
	s.mu.Unlock()
	if n >= 60 {
		return s.opCancel(ctx)
	}
	qos := []string{lab.QOSLow, lab.QOSNormal, lab.QOSHigh}[s.rng.IntN(3)]
	gpus := []int{1, 2, 4, 8}[s.rng.IntN(4)]
	out, err := s.l.Slurm(ctx, "sbatch", "--parsable", "-J", "soak-"+s.ns, "-p", lab.Partition, "--qos="+qos,
		fmt.Sprintf("--gres=gpu:%d", gpus), "-o", "/dev/null", "--wrap", fmt.Sprintf("sleep %d", 20+s.rng.IntN(100)))
	if err != nil {
		return fmt.Errorf("sbatch: %w: %s", err, strings.TrimSpace(string(out)))
	}
	s.mu.Lock()
	s.jobs = append(s.jobs, strings.TrimSpace(string(out)))
	s.mu.Unlock()
	return nil
}

func (s *soak) opCancel(ctx context.Context) error {
	s.mu.Lock()
	if len(s.jobs) == 0 {
		s.mu.Unlock()
		return nil
	}
	i := s.rng.IntN(len(s.jobs))
	id := s.jobs[i]
	s.jobs = append(s.jobs[:i], s.jobs[i+1:]...)
	s.mu.Unlock()
	if out, err := s.l.Slurm(ctx, "scancel", id); err != nil {
		return fmt.Errorf("scancel %s: %w: %s", id, err, out)
	}
	return nil
}

func (s *soak) opRelabel(ctx context.Context) error {
	var v any = fmt.Sprint(s.step)
	if s.rng.IntN(2) == 0 {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"soak.onepool.dev/touched": v}}})
	_, err := s.kc.CoreV1().Nodes().Patch(ctx, s.node(), types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
