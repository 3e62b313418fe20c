package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/stats"
)

// The fault soak (make soak): random operations on both sides while the
// lab's daemons are killed and restarted, slurmrestd is made sick behind a
// proxy and the token is rotated; invariants are checked all along and once
// more after each fault, when everything has converged. SOAK_MINUTES sets
// its length (unset: the test is skipped, so `make e2e` does not run it),
// SOAK_SEED makes a run repeat (unset: the clock's).
const (
	envSoakMinutes = "SOAK_MINUTES"
	envSoakSeed    = "SOAK_SEED"
	// soakConverge bounds the wait for convergence after a fault; past it
	// the state left is a violation.
	soakConverge = 120 * time.Second
	// soakMaxPods bounds the soak's onepool pods, both namespaces together.
	soakMaxPods = 24
)

// soak is one run: the lab, its seeded choices, the admin drains it made
// (the one thing only the soak knows: they must survive everything), and
// what it found.
type soak struct {
	t    *testing.T
	l    *lab.Lab
	kc   kubernetes.Interface
	c    client.Client
	sc   *slurmrest.Client // straight to slurmrestd, with the soak's own token
	rng  *rand.Rand
	seed uint64
	ns   string
	px   *faultProxy

	mu         sync.Mutex
	version    int                  // bumped whenever adminDrain changes
	adminDrain map[string]string    // Slurm node -> the admin's reason, while drained by the soak's admin
	adminAt    map[string]time.Time // when the soak's admin last changed the node
	inflight   map[string]bool      // an admin command on the node is under way
	uncertain  map[string]bool      // nodes whose admin state the soak lost track of
	ourDeletes map[types.UID]bool
	jobs       []string // the soak's own sbatch jobs
	step       int
	stepWhat   string
	lastKill   map[string]time.Time // daemon -> when the soak last killed it

	ops, faults      int
	waivers          int // excuses taken: each bounded, each logged
	deletionsChecked int // pods deleted by onepool whose job the soak checked
	// slurmdDeletionsChecked: the NodeSet's slurmd pods deleted, each
	// checked against its Slurm node's jobs.
	slurmdDeletionsChecked int
	claimsChecked          map[types.UID]bool // claim pods whose claim held their job's GPUs
	converge               []time.Duration
	violations             []string
	reported               map[string]bool
}

func TestSoak(t *testing.T) {
	minutes, err := strconv.ParseFloat(os.Getenv(envSoakMinutes), 64)
	if err != nil || minutes <= 0 {
		t.Skipf("%s is not set: `make soak` runs the fault soak", envSoakMinutes)
	}
	if lab.ChartMode() {
		t.Skip("the soak kills and restarts the lab's processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSoakSeed); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSoakSeed, s, err)
		}
	}
	s := newSoak(t, seed)
	t.Logf("soak: seed %d (repeat with %s=%d), %.1f minutes, Slurm %s", seed, envSoakSeed, seed, minutes, s.l.Release().Name)

	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { defer bg.Done(); s.watchPods(ctx) }()
	go func() { defer bg.Done(); s.watchNodeSetPods(ctx) }()
	go func() { defer bg.Done(); s.checkLoop(ctx) }()

	// Ctrl-C (or SIGTERM) ends the run early, as if its time were up: the
	// final convergence, the report and the teardown still run.
	interrupted, unnotify := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer unnotify()
	start := time.Now()
	end := start.Add(time.Duration(minutes * float64(time.Minute)))
	for time.Now().Before(end) && interrupted.Err() == nil {
		s.nextStep()
		if s.rng.IntN(4) == 0 {
			s.fault()
		} else {
			s.op()
			time.Sleep(time.Duration(200+s.rng.IntN(1800)) * time.Millisecond)
		}
	}
	if interrupted.Err() != nil {
		t.Logf("soak: interrupted after %s; converging and tearing down", time.Since(start).Round(time.Second))
	}
	s.setStep("final convergence")
	s.awaitConvergence("end of the run", time.Now())
	stop()
	bg.Wait()
	s.report(time.Since(start))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		t.Error(v)
	}
}

func newSoak(t *testing.T, seed uint64) *soak {
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, l: l, kc: kc, c: c, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x50a4)), ns: uniqueName("soak"),
		adminDrain: map[string]string{}, adminAt: map[string]time.Time{}, inflight: map[string]bool{}, uncertain: map[string]bool{}, ourDeletes: map[types.UID]bool{}, lastKill: map[string]time.Time{}, reported: map[string]bool{}, claimsChecked: map[types.UID]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The checks read Slurm with a token of their own: the soak rotates
	// and spoils the components' token.
	tok, err := l.MintToken(ctx, "slurm", 4*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.sc, err = slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: tokFile, Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}

	s.clearLeftovers(ctx)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns,
		Labels: map[string]string{lab.LabelGPUClaims: lab.GPUClaimsDisabled}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its pods' GPUs come through claims (the GPU webhook is on there).
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.claimsNS()}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.px, err = startFaultProxy(l.RESTURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.teardown)
	if err := l.SetComponentRESTURL(ctx, s.px.URL()); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.NodeNames() {
		if err := s.ensureSlurmdPod(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.startNodeSet(ctx); err != nil {
		t.Fatal(err)
	}
	s.awaitConvergence("start", time.Now())
	s.converge = nil // the start is no fault
	// The claim pod goes to the NodeSet's nodes: start once Slurm has them.
	// Otherwise its immediate allocation can come before their slurmd has
	// registered, Slurm answers that no node could ever run it, and nothing
	// Kubernetes sees changes to bring the pod back soon (a CI run, Nov 27:
	// the Nodes and their ResourceSlices were there from the soak before).
	s.nodeSetEnv().waitRegistered(s.l.DynNodeNames()[:2], 90*time.Second)
	if err := s.startClaimPod(ctx); err != nil {
		t.Fatalf("a pod with a GPU claim before the run: %v", err)
	}
	return s
}

// teardown puts the lab back as the soak found it: components on
// slurmrestd itself, no cordon, no drain, no pod, no job of the soak's.
func (s *soak) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.px.set(proxyPass)
	if err := s.l.Up(ctx); err != nil {
		s.t.Errorf("teardown: lab up: %v", err)
	}
	if err := s.l.SetComponentRESTURL(ctx, ""); err != nil {
		s.t.Errorf("teardown: components back on slurmrestd: %v", err)
	}
	_ = s.px.Close()
	for _, n := range s.l.NodeNames() {
		_ = s.setCordon(ctx, n, false, "") // best effort, as the rest of the clean-up
	}
	zero := int64(0)
	_ = s.kc.CoreV1().Pods(s.claimsNS()).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = s.kc.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if len(s.jobs) > 0 {
		_, _ = s.l.Slurm(ctx, append([]string{"scancel"}, s.jobs...)...)
	}
	// Slurmd pods go last: their deletion drains the nodes until they go.
	s.awaitNoPods(ctx, "the soak's pods gone", s.claimsNS(), s.ns)
	_ = s.kc.CoreV1().Namespaces().Delete(ctx, s.claimsNS(), metav1.DeleteOptions{})
	_ = s.kc.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{})
	// The NodeSet goes once no job runs on its nodes: its slurmd pods
	// wait for the claim pods' jobs, gone now.
	s.nodeSetEnv().cleanup()
	// The admin's drains, the syncer's "slurmd pod deleted" drains (no
	// slurmd pod is left to resume them) and the drains Slurm made itself
	// after a kill lost its state ("Duplicate jobid" on a dynamic node:
	// CI, 2026-11-26) end with the soak, on every node of the lab; the
	// soak proves it left none, nor a job.
	drained, err := s.l.ResumeDrained(ctx)
	if err != nil {
		s.t.Errorf("teardown: %v", err)
	}
	if len(drained) > 0 {
		s.t.Logf("soak: teardown resumed %v", drained)
	}
	if ok, last := eventuallyCtx(ctx, "no drain and no job left", func() (bool, string) {
		d, derr := s.l.DrainedNodes(ctx)
		j, jerr := s.l.SlurmJobs(ctx)
		if len(d) > 0 {
			_, _ = s.l.ResumeDrained(ctx)
		}
		return derr == nil && jerr == nil && len(d) == 0 && len(j) == 0, fmt.Sprintf("drained %v (%v), jobs %v (%v)", d, derr, j, jerr)
	}); !ok {
		s.t.Errorf("teardown: the soak leaves the lab unclean: %s", last)
	}
}

// clearLeftovers undoes what a soak killed before its teardown left: its
// namespaces (slurmd and onepool pods), its Slurm jobs, cordons, and
// drains on the lab's nodes. A clean lab is left as it is.
func (s *soak) clearLeftovers(ctx context.Context) {
	nss, err := s.kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Logf("soak: leftovers: %v", err)
		return
	}
	var left []string
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, "soak-") && ns.Name != s.ns {
			left = append(left, ns.Name)
		}
	}
	if out, err := s.l.Slurm(ctx, "squeue", "-h", "-o", "%i %j"); err == nil {
		var jobs []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if id, name, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "soak-") {
				jobs = append(jobs, id)
			}
		}
		if len(jobs) > 0 {
			s.t.Logf("soak: cancelling %d jobs an earlier soak left", len(jobs))
			_, _ = s.l.Slurm(ctx, append([]string{"scancel"}, jobs...)...)
		}
	}
	if len(left) == 0 {
		return
	}
	s.t.Logf("soak: an earlier soak left %v; clearing it", left)
	zero := int64(0)
	for _, ns := range left {
		_ = s.kc.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = s.kc.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}
	for _, n := range s.l.NodeNames() {
		_ = s.setCordon(ctx, n, false, "") // best effort, as the rest of the clean-up
	}
	s.awaitNoPods(ctx, "the earlier soak's pods gone", left...)
	for _, n := range s.l.NodeNames() {
		_, _ = s.l.Slurm(ctx, "scontrol", "update", "nodename="+n, "state=resume")
	}
}

// awaitNoPods waits, as long as ctx lets it, until the namespaces hold no
// pod.
func (s *soak) awaitNoPods(ctx context.Context, what string, namespaces ...string) {
	eventuallyCtx(ctx, what, func() (bool, string) {
		for _, ns := range namespaces {
			pods, err := s.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			if len(pods.Items) > 0 {
				return false, fmt.Sprintf("%d pods left in %s", len(pods.Items), ns)
			}
		}
		return true, ""
	})
}

func (s *soak) nextStep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step++
}

func (s *soak) setStep(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stepWhat = what
	s.t.Logf("soak step %d: %s", s.step, what)
}

// violate records a broken invariant with what is needed to look into it:
// the seed, the step, and both sides' state. The same state seen again by
// a later check is the same violation.
func (s *soak) violate(invariant, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported[invariant+state] {
		return
	}
	s.reported[invariant+state] = true
	v := fmt.Sprintf("soak violation (seed %d, step %d %q): %s\n    %s", s.seed, s.step, s.stepWhat, invariant, state)
	s.t.Log(v)
	s.violations = append(s.violations, v)
}

func (s *soak) report(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rel := "slurm=" + s.l.Release().Name
	p99 := stats.Percentile(s.converge, 0.99).Seconds()
	fmt.Printf("BENCH soak_operations %d count %s\n", s.ops, rel)
	fmt.Printf("BENCH soak_faults %d count %s\n", s.faults, rel)
	fmt.Printf("BENCH soak_proxy_answers_spoiled %d count %s\n", s.px.spoiled(), rel)
	fmt.Printf("BENCH soak_pod_deletions_checked %d count %s\n", s.deletionsChecked, rel)
	fmt.Printf("BENCH soak_slurmd_pod_deletions_checked %d count %s\n", s.slurmdDeletionsChecked, rel)
	fmt.Printf("BENCH soak_claim_pods_checked %d count %s\n", len(s.claimsChecked), rel)
	fmt.Printf("BENCH soak_invariant_violations %d count %s\n", len(s.violations), rel)
	fmt.Printf("BENCH soak_waivers %d count %s\n", s.waivers, rel)
	fmt.Printf("BENCH soak_convergence_p99_s %.1f s %s n=%d\n", p99, rel, len(s.converge))
	fmt.Printf("BENCH soak_minutes %.1f min %s\n", d.Minutes(), rel)
	fmt.Printf("BENCH soak_seed %d seed %s\n", s.seed, rel)
}

// eventuallyCtx polls cond every 500 ms until it holds or ctx ends; it
// reports whether it held and, if not, the last state seen.
func eventuallyCtx(ctx context.Context, what string, cond func() (bool, string)) (bool, string) {
	last := ""
	for {
		ok, state := cond()
		if ok {
			return true, ""
		}
		last = state
		select {
		case <-ctx.Done():
			return false, what + ": " + last
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ensureSlurmdPod makes the slurmd pod the soak keeps on each lab node,
// owned by a NodeSet as the NodeSet controller's are: the syncer acts on
// the nodes that have one.
func (s *soak) ensureSlurmdPod(ctx context.Context, node string) error {
	owner, err := lab.EnsureHandNodeSet(ctx, s.c, s.ns)
	if err != nil {
		return err
	}
	_, err = s.kc.CoreV1().Pods(s.ns).Create(ctx, lab.HandSlurmdPod(owner, s.ns, "slurmd-"+node, node), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
