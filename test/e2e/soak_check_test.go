package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// The soak's invariants. Continuous ones are checked every 2 s whatever
// holds (a read that fails skips the round); the others once everything
// has converged after each fault, and at the end.

// checkLoop checks the continuous invariants until ctx ends.
func (s *soak) checkLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		s.checkContinuous(ctx)
	}
}

// slurmView is one read of Slurm's nodes and jobs.
type slurmView struct {
	nodes map[string]slurmrest.Node
	jobs  []slurmrest.Job
}

func (s *soak) readSlurm(ctx context.Context) (slurmView, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v := slurmView{nodes: map[string]slurmrest.Node{}}
	nl, err := s.sc.ListNodes(ctx, time.Time{})
	if err != nil {
		return v, err
	}
	for _, n := range nl.Nodes {
		v.nodes[n.Name] = n
	}
	jl, err := s.sc.ListJobs(ctx, time.Time{})
	if err != nil {
		return v, err
	}
	v.jobs = jl.Jobs
	return v, nil
}

func (s *soak) checkContinuous(ctx context.Context) {
	s.mu.Lock()
	before := s.version
	s.mu.Unlock()
	v, err := s.readSlurm(ctx)
	if err != nil {
		return
	}
	s.mu.Lock()
	admin := map[string]string{}
	if s.version == before {
		for n, r := range s.adminDrain {
			if !s.inflight[n] {
				admin[n] = r
			}
		}
	}
	s.mu.Unlock()
	for n, reason := range admin {
		s.checkAdminDrain(n, reason, v.nodes[n])
	}
	if p := gpusHeldTwice(v.jobs); p != "" {
		s.violate("no GPU index held by two jobs on a node", p)
	}
	if p := s.jobsPerPod(v.jobs); p != "" {
		s.violate("one placeholder job per pod", p)
	}
}

// checkAdminDrain: an admin's drain is never resumed or rewritten. One made
// less than soakStateSaveWindow before slurmctld was SIGKILLed may be lost
// by Slurm itself (it saves its state within seconds): that is a waiver
// (counted, BENCH soak_waivers), and the node leaves the admin checks. A
// drain older than that, lost across a kill, is a violation: onepool
// resuming an admin's drain after a restart is the riskiest case.
func (s *soak) checkAdminDrain(node, reason string, n slurmrest.Node) {
	if n.State.Drain() && n.Reason == reason {
		return
	}
	state := fmt.Sprintf("soak's admin drained %s with %q; Slurm shows %v reason %q (changed %s)", node, reason, n.State, n.Reason, n.ReasonChanged.Format(time.RFC3339))
	s.mu.Lock()
	kill := s.lastKill["slurmctld"]
	lost := kill.After(s.adminAt[node]) && kill.Sub(s.adminAt[node]) < soakStateSaveWindow
	if lost {
		s.waivers++
		s.uncertain[node] = true
		delete(s.adminDrain, node)
		s.version++
	}
	s.mu.Unlock()
	if lost {
		s.t.Logf("soak: waiver: %s: lost across slurmctld's SIGKILL %s after it (Slurm's own state save)", state, kill.Sub(s.adminAt[node]).Round(time.Millisecond))
		return
	}
	s.violate("no admin drain resumed or rewritten", state)
}

// gpusHeldTwice names a GPU index two RUNNING jobs hold on one node.
func gpusHeldTwice(jobs []slurmrest.Job) string {
	held := map[string]uint32{}
	for _, j := range jobs {
		if j.State.Base() != slurmrest.JobRunning {
			continue
		}
		for node := range j.GresDetail {
			idx, err := j.GPUIndexes(node)
			if err != nil {
				return fmt.Sprintf("job %d on %s: %v", j.ID, node, err)
			}
			for _, i := range idx {
				k := fmt.Sprintf("%s/gpu%d", node, i)
				if other, ok := held[k]; ok {
					return fmt.Sprintf("%s held by jobs %d and %d", k, other, j.ID)
				}
				held[k] = j.ID
			}
		}
	}
	return ""
}

// placeholderOf parses a placeholder job's comment into the pod it holds
// a place for (false for other jobs and other namespaces).
func (s *soak) placeholderOf(j slurmrest.Job) (name string, uid types.UID, ok bool) {
	rest, ok := strings.CutPrefix(j.Comment, keys.PlaceholderCommentPrefix+"pod="+s.ns+"/")
	if !ok {
		if rest, ok = strings.CutPrefix(j.Comment, keys.PlaceholderCommentPrefix+"pod="+s.claimsNS()+"/"); !ok {
			return "", "", false
		}
	}
	// "<name>;uid=<uid>;user=<user>;sig=<hmac>"
	name, u, ok := strings.Cut(rest, ";uid=")
	u, _, _ = strings.Cut(u, ";")
	return name, types.UID(u), ok
}

func (s *soak) jobsPerPod(jobs []slurmrest.Job) string {
	per := map[types.UID][]string{}
	for _, j := range jobs {
		if _, uid, ok := s.placeholderOf(j); ok && !j.State.Finished() {
			per[uid] = append(per[uid], fmt.Sprintf("%d(%s)", j.ID, strings.Join(j.State, "+")))
		}
	}
	for uid, js := range per {
		if len(js) > 1 {
			return fmt.Sprintf("pod uid %s has %d active jobs %v", uid, len(js), js)
		}
	}
	return ""
}

// watchPods checks every deletion of a onepool pod the soak did not make:
// it must not come while the pod's job ran unpreempted.
func (s *soak) watchPods(ctx context.Context) {
	// Both of the soak's namespaces: one informer, so one handler goroutine.
	f := informers.NewSharedInformerFactoryWithOptions(s.kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "soak=infer"
	}))
	inf := f.Core().V1().Pods().Informer()
	seen := map[types.UID]bool{}
	check := func(p *corev1.Pod) {
		if (p.Namespace != s.ns && p.Namespace != s.claimsNS()) || seen[p.UID] {
			return
		}
		seen[p.UID] = true
		go s.checkDeletion(ctx, p.DeepCopy(), time.Now())
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o any) {
			if p, ok := o.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				check(p)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				check(p)
			}
		},
	})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

// checkDeletion: a pod deleted by onepool went after its job ended or
// began to be preempted, never while the job ran on.
func (s *soak) checkDeletion(ctx context.Context, p *corev1.Pod, seen time.Time) {
	s.mu.Lock()
	ours := s.ourDeletes[p.UID]
	s.mu.Unlock()
	id, err := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32)
	if ours || err != nil {
		return
	}
	asked := seen
	if p.DeletionTimestamp != nil {
		asked = p.DeletionTimestamp.Time
		if p.DeletionGracePeriodSeconds != nil {
			asked = asked.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
		}
	}
	var j *slurmrest.Job
	ok, last := eventuallyCtx(ctxTimeout(ctx, 2*time.Minute), "job read", func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		j, err = s.sc.GetJob(cctx, uint32(id))
		if errors.Is(err, slurmrest.ErrNotFound) {
			return true, ""
		}
		return err == nil, fmt.Sprint(err)
	})
	if !ok || j == nil {
		s.t.Logf("soak: pod %s deleted (not by the soak); its job %d cannot be read: %s", p.Name, id, last)
		return
	}
	if _, uid, ok := s.placeholderOf(*j); !ok || uid != p.UID {
		// slurmctld lost the pod's job (SIGKILLed before it saved its
		// state) and gave its id to another job: the pod's job is gone.
		s.t.Logf("soak: pod %s deleted; Slurm's job %d is now another's (%q): the pod's job was lost", p.Name, id, j.Comment)
		return
	}
	s.mu.Lock()
	s.deletionsChecked++
	s.mu.Unlock()
	const slack = 2 * time.Second // Slurm's times are whole seconds
	switch {
	case !j.PreemptTime.IsZero() && !asked.Before(j.PreemptTime.Add(-slack)):
	case j.State.Finished() && !asked.Before(j.EndTime.Add(-slack)):
	default:
		s.violate("no pod deleted or evicted while its job ran", fmt.Sprintf(
			"pod %s (uid %s, node %q) deletion asked at %s; its job %d: %v on %q, start %s, end %s, preempt %s",
			p.Name, p.UID, p.Spec.NodeName, asked.Format(time.RFC3339), j.ID, j.State, j.Nodes,
			j.StartTime.Format(time.RFC3339), j.EndTime.Format(time.RFC3339), j.PreemptTime.Format(time.RFC3339)))
	}
}

func ctxTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	go func() { <-c.Done(); cancel() }()
	return c
}

// awaitConvergence waits until everything has converged after a fault and
// records how long that took from start (when the fault was undone: the
// restart of a killed daemon counts); not converging within soakConverge
// is a violation.
func (s *soak) awaitConvergence(after string, start time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), soakConverge)
	defer cancel()
	var seen []string // what was not converged yet, each state once
	prev := ""
	var restarted time.Time
	ok, last := eventuallyCtx(ctx, "converged", func() (bool, string) {
		if down := s.l.Status(io.Discard); down > 0 && time.Since(restarted) > 5*time.Second {
			// A component that exits is started again, as its
			// Deployment's kubelet would; unless the fault explains the
			// exit, that is a violation (checkExits).
			s.checkExits(after)
			restarted = time.Now()
			uctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			err := s.l.Up(uctx)
			cancel()
			s.t.Logf("soak step %d: %d lab daemons were down; lab up: %v", s.step, down, err)
		}
		ok, state := s.converged(ctx)
		if !ok && state != prev {
			seen = append(seen, fmt.Sprintf("+%.1fs %s", time.Since(start).Seconds(), state))
			prev = state
		}
		return ok, state
	})
	d := time.Since(start)
	if ok && d > 10*time.Second {
		s.t.Logf("soak step %d: slow to converge after %s: %s", s.step, after, strings.Join(seen, " | "))
	}
	s.mu.Lock()
	s.converge = append(s.converge, d)
	s.mu.Unlock()
	if !ok {
		s.violate(fmt.Sprintf("everything converges within %s after %s", soakConverge, after), last)
		return
	}
	s.t.Logf("soak step %d: converged %.1f s after %s", s.step, d.Seconds(), after)
}

// converged says whether both sides agree, and what does not.
func (s *soak) converged(ctx context.Context) (bool, string) {
	if down := s.l.Status(io.Discard); down > 0 {
		return false, fmt.Sprintf("%d lab daemons down", down)
	}
	v, err := s.readSlurm(ctx)
	if err != nil {
		return false, "slurm: " + err.Error()
	}
	// Each read has its own deadline: one call stuck on a dead
	// connection must not use up the whole wait.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.kc.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		return false, "nodes: " + err.Error()
	}
	pods, err := s.kc.CoreV1().Pods(s.ns).List(rctx, metav1.ListOptions{})
	if err != nil {
		return false, "pods: " + err.Error()
	}
	claimPods, err := s.kc.CoreV1().Pods(s.claimsNS()).List(rctx, metav1.ListOptions{})
	if err != nil {
		return false, "claim pods: " + err.Error()
	}
	pods.Items = append(pods.Items, claimPods.Items...)
	var problems []string
	if p := s.jobsPerPod(v.jobs); p != "" {
		problems = append(problems, p)
	}
	problems = append(problems, s.nodeProblems(v, nodes.Items, pods.Items)...)
	problems = append(problems, s.podProblems(v, pods.Items)...)
	problems = append(problems, s.claimProblems(rctx, v, pods.Items)...)
	problems = append(problems, s.nodeSetProblems(rctx, v, nodes.Items)...)
	return len(problems) == 0, strings.Join(problems, "; ")
}

// nodeProblems: every cordoned Node's Slurm node drained with onepool's
// reason for it (unless an admin's drain holds it); no onepool drain
// without a live cause; every node responding, with a Ready slurmd pod.
func (s *soak) nodeProblems(v slurmView, kn []corev1.Node, pods []corev1.Pod) []string {
	s.mu.Lock()
	admin, uncertain := maps.Clone(s.adminDrain), maps.Clone(s.uncertain)
	s.mu.Unlock()
	var out []string
	for _, name := range s.l.NodeNames() {
		sn, ok := v.nodes[name]
		if !ok {
			out = append(out, name+": Slurm does not list it")
			continue
		}
		i := slices.IndexFunc(kn, func(n corev1.Node) bool { return n.Name == name })
		j := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == "slurmd-"+name })
		switch {
		case i < 0:
			out = append(out, name+": no Node")
			continue
		case j < 0 || !podReady(&pods[j]) || pods[j].DeletionTimestamp != nil:
			out = append(out, name+": no Ready slurmd pod")
			continue
		case sn.State.Base() == "DOWN" || sn.State.Has("NOT_RESPONDING"):
			out = append(out, fmt.Sprintf("%s: Slurm %v", name, sn.State))
			continue
		}
		if r, ok := admin[name]; ok {
			if !sn.State.Drain() || sn.Reason != r {
				out = append(out, fmt.Sprintf("%s: admin drain %q, Slurm %v %q", name, r, sn.State, sn.Reason))
			}
			continue
		}
		if uncertain[name] {
			continue
		}
		node := kn[i]
		if node.Spec.Unschedulable {
			want, _ := drain.CordonReason(node.Annotations[keys.AnnotationCordonReason])
			if !sn.State.Drain() || sn.Reason != want {
				out = append(out, fmt.Sprintf("%s: cordoned, Slurm %v %q (want drained %q)", name, sn.State, sn.Reason, want))
			}
		} else if sn.State.Drain() {
			out = append(out, fmt.Sprintf("%s: not cordoned, no admin drain, Slurm %v %q", name, sn.State, sn.Reason))
			if !strings.HasPrefix(sn.Reason, drain.Prefix) {
				s.resumeSlurmsOwn(name, sn)
			}
		}
	}
	return out
}

// podProblems: no active placeholder job without its live pod; every bound
// pod runs on its job's node while the job runs.
func (s *soak) podProblems(v slurmView, pods []corev1.Pod) []string {
	byUID := map[types.UID]*corev1.Pod{}
	for i := range pods {
		byUID[pods[i].UID] = &pods[i]
	}
	jobs := map[uint32]slurmrest.Job{}
	var out []string
	for _, j := range v.jobs {
		jobs[j.ID] = j
		name, uid, ok := s.placeholderOf(j)
		if !ok || j.State.Finished() {
			continue
		}
		if p := byUID[uid]; p == nil || p.DeletionTimestamp != nil {
			out = append(out, fmt.Sprintf("job %d (%v) holds a place for pod %s, which is gone", j.ID, j.State, name))
		}
	}
	for _, p := range pods {
		if p.Labels["soak"] != "infer" || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		id, err := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32)
		if err != nil {
			out = append(out, fmt.Sprintf("pod %s bound to %s names no job", p.Name, p.Spec.NodeName))
			continue
		}
		j, ok := jobs[uint32(id)]
		if !ok || j.State.Base() != slurmrest.JobRunning || j.Nodes != p.Spec.NodeName {
			out = append(out, fmt.Sprintf("pod %s bound to %s, its job %d: %v on %q", p.Name, p.Spec.NodeName, id, j.State, j.Nodes))
		}
	}
	return out
}

// resumeSlurmsOwn: a drain neither onepool nor the soak's admin made is
// Slurm's own ("Duplicate jobid" when slurmctld, SIGKILLed before saving
// its state, gives a running job's id again; "Kill task failed"). No
// invariant is onepool's there; the soak's admin resumes it, as an admin
// would, once per drain.
func (s *soak) resumeSlurmsOwn(name string, n slurmrest.Node) {
	key := name + "\x00" + n.Reason + "\x00" + n.ReasonChanged.String()
	s.mu.Lock()
	done := s.reported[key]
	s.reported[key] = true
	s.mu.Unlock()
	if done {
		return
	}
	s.t.Logf("soak step %d: Slurm drained %s itself (%q, set by %s); the soak's admin resumes it", s.step, name, n.Reason, n.ReasonSetByUser)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := s.l.Slurm(ctx, "scontrol", "update", "nodename="+name, "state=resume"); err != nil {
		s.t.Logf("soak: resume %s: %v %s", name, err, out)
	}
}

// soakStateSaveWindow bounds how long Slurm may take to save a change to
// its state: a change older than this survives a SIGKILL of slurmctld.
const soakStateSaveWindow = 10 * time.Second

// apiKillCauses are the faults a Kubernetes-side component may exit over:
// a leader that cannot renew its lease while etcd or the apiserver is
// down exits by design (controller-runtime, kube-controller-manager).
var apiKillCauses = []string{"SIGKILL etcd", "SIGKILL kube-apiserver"}

// kubeSide are the daemons that hold a lease or watch the apiserver.
var kubeSide = []string{"kube-apiserver", "onepool-controller-manager", "onepool-scheduler", "kube-controller-manager", "kube-scheduler", "kwok", "kubelet"}

// checkExits looks at the daemons that are down during or after fault: the
// one the fault killed is expected; a Kubernetes-side one after an etcd or
// apiserver kill is a waiver (counted); any other exited by itself (a
// panic, a fatal error) and is a violation, whatever restarts it.
func (s *soak) checkExits(fault string) {
	for _, d := range s.l.StoppedDaemons() {
		switch {
		case fault == "SIGKILL "+d:
		case slices.Contains(apiKillCauses, fault) && slices.ContainsFunc(kubeSide, func(k string) bool { return strings.HasPrefix(d, k) }):
			s.mu.Lock()
			s.waivers++
			s.mu.Unlock()
			s.t.Logf("soak: waiver: %s exited during %s (a lease it could not renew)", d, fault)
		default:
			s.violate("no component exits unless the soak killed it", fmt.Sprintf("%s is down after %s; its log: %s", d, fault, filepath.Join(s.l.LogDir(), d+".log")))
		}
	}
}
