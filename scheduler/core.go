package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
)

// manager is the scheduler's logic behind the framework plugin: it keeps one
// placement per pod (or gang), submits placeholder jobs, answers where a
// pod goes, and ends pods and jobs together.
type manager struct {
	args     *Args
	log      klog.Logger
	jobs     JobCache
	kube     kubernetes.Interface
	fitter   *fitter
	pol      *policies
	sub      *submitter
	book     *jobBook
	claimer  *claimer
	recorder events.EventRecorder
	activate func(pods []*corev1.Pod)
	script   func(owner) string
	leader   Leadership
	metrics  *metrics
	// proof signs and checks placeholder comments; set before any job is
	// read (Run loads it) and never changed after.
	proof *commentKeys

	// rec is the manager's view of the records of pods and placements.
	rec   coreRecords
	rel   *releaser
	watch *watcher
	life  *lifecycle

	submitQ workqueue.TypedRateLimitingInterface[string]
	lifeQ   workqueue.TypedRateLimitingInterface[string]
	retry   *retrier
}

// managerConfig wires a manager.
type managerConfig struct {
	Args   *Args
	Log    klog.Logger
	Slurm  Slurm
	Jobs   JobCache
	Kube   kubernetes.Interface
	Groups GroupReader
	// Tenants says which TenantPolicy covers a pod's namespace; nil: no
	// policy applies (every pod asks what it likes).
	Tenants Tenants
	Nodes   corelisters.NodeLister
	// Slices and Claims are read to allocate GPU claims from Slurm's
	// answer; nil: pods with a GPU claim are not bound.
	Slices resourcelisters.ResourceSliceLister
	Claims resourcelisters.ResourceClaimLister
	// Fit checks the pods' node constraints before a job is asked, and
	// SlurmNodes lists the names of Slurm's nodes (only those can be left
	// out of a job); nil Fit: Slurm is told no node constraint.
	Fit        *NodeFit
	SlurmNodes func(ctx context.Context, want []string) (map[string]bool, error)
	Recorder   events.EventRecorder
	// Activate moves pods back into the scheduling queue.
	Activate func(pods []*corev1.Pod)
	// Leader gates every action on Slurm and on pods to the lease holder;
	// nil: this is the only replica.
	Leader Leadership
	// Registerer receives the plugin's metrics; nil: not exported.
	Registerer prometheus.Registerer
	// PlaceholderKey signs placeholder comments; nil: Run reads it from
	// Args.PlaceholderKeySecret.
	PlaceholderKey []byte
	// OwnUser is the Slurm user of onepool's token (a job of a pod whose
	// policy names no Slurm user runs as it); nil: not named in comments.
	OwnUser func() (string, error)
}

// newManager returns a manager; Run starts its loops.
func newManager(cfg managerConfig) (*manager, error) {
	if cfg.Fit != nil && (cfg.Nodes == nil || cfg.SlurmNodes == nil) {
		// The filters' verdicts are told to Slurm as the Slurm nodes to
		// leave out: without Nodes and Slurm's node names there is none.
		return nil, errors.New("onepool: node filters (Fit) need Nodes and SlurmNodes")
	}
	host, port, _ := releaseHostPort(cfg.Args.ReleaseURL) // validated with the args
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("onepool: metrics: %w", err)
	}
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second)
	leader := cfg.Leader
	if leader == nil {
		g := NewLeaderGate()
		g.Lead()
		leader = g
	}
	var proof *commentKeys
	if cfg.PlaceholderKey != nil {
		if proof, err = newCommentKeys(cfg.PlaceholderKey); err != nil {
			return nil, fmt.Errorf("onepool: %w", err)
		}
	}
	st := newStore()
	pol := &policies{args: cfg.Args, tenants: cfg.Tenants, st: capRecords{st}}
	c := &manager{
		leader: leader, metrics: m, proof: proof,
		args: cfg.Args, log: cfg.Log, jobs: cfg.Jobs, kube: cfg.Kube,
		fitter: &fitter{fit: cfg.Fit, nodes: cfg.Nodes, slices: cfg.Slices, slurmNodes: cfg.SlurmNodes}, recorder: cfg.Recorder, activate: cfg.Activate,
		script: func(o owner) string { return placeholderScript(o, host, port) },
		pol:    pol, rec: coreRecords{st},
		submitQ: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "onepool-submit"}),
		lifeQ: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "onepool-lifecycle"}),
	}
	c.retry = newRetrier(retryRecords{st}, func(pods []*corev1.Pod) { c.activate(pods) })
	c.book = &jobBook{st: bookRecords{st}, jobs: cfg.Jobs, lifeQ: c.lifeQ, metrics: m, log: cfg.Log,
		proof: func() *commentKeys { return c.proof }, activate: func(pods []*corev1.Pod) { c.activate(pods) }}
	c.watch = &watcher{st: watchRecords{st}, slurm: cfg.Slurm, log: cfg.Log, startPoll: cfg.Args.StartPollInterval.Duration,
		watchAll: cfg.Args.WatchInterval.Duration, observe: c.book.observe}
	c.life = &lifecycle{st: lifeRecords{st}, q: c.lifeQ, slurm: cfg.Slurm, jobs: cfg.Jobs, kube: cfg.Kube, recorder: cfg.Recorder,
		leader: leader, metrics: m, log: cfg.Log,
		observe: c.book.observe, jobOf: c.book.jobOf,
		constraints: c.fitter.exclude,
		activate:    func(pods []*corev1.Pod) { c.activate(pods) }}
	c.claimer = &claimer{st: claimRecords{st}, kube: cfg.Kube, slices: cfg.Slices, claims: cfg.Claims, recorder: cfg.Recorder,
		request: c.pol.request}
	c.sub = &submitter{st: submitRecords{st}, q: c.submitQ, lifeQ: c.lifeQ, retry: c.retry, args: cfg.Args, slurm: cfg.Slurm, jobs: cfg.Jobs,
		groups: cfg.Groups, pol: pol, fitter: c.fitter, leader: leader, metrics: m, recorder: cfg.Recorder, log: cfg.Log,
		script: c.script, ownUser: cfg.OwnUser, proof: func() *commentKeys { return c.proof },
		observe: c.book.observe, activate: func(pods []*corev1.Pod) { c.activate(pods) }}
	c.rel = &releaser{st: releaseRecords{st}, kube: cfg.Kube, leader: leader, answers: m.release, log: cfg.Log}
	return c, nil
}

// decision is where a pod goes: Node (a Kubernetes node) once Slurm
// allocated it, else Message says why it waits.
type decision struct {
	Node    string
	Message string
}

// Place decides for one pod in a scheduling cycle. It never calls Slurm:
// it reads onepool's records and queues work.
func (c *manager) Place(pod *corev1.Pod) decision {
	if _, err := c.pol.request(pod); err != nil {
		if errors.Is(err, errNotCached) {
			// Not the pod's fault, and soon over: no event (a standby that
			// takes over mid-burst sees many namespaces made a moment ago).
			c.retry.pod(pod)
			return decision{Message: "waiting: " + err.Error()}
		}
		c.invalidRequest(pod, err)
		if errors.Is(err, errPolicy) {
			return decision{Message: "refused: " + err.Error()}
		}
		return decision{Message: "invalid Slurm request: " + err.Error()}
	}
	o := ownerOf(pod)
	d := c.rec.place(pod, c.jobs.Stale(), c.fitter)
	if g := d.givenBack; g != nil {
		c.log.Info("A placeholder job started on a node its pod cannot use; giving it back", "owner", o.String(), "job", g.job, "node", g.node, "why", g.why)
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, keys.EventJobMisplaced, keys.ActionSchedule,
			"Slurm job %d started on %s, where the pod cannot run (%s); it is given back and a new job asked for without %s", g.job, g.node, g.why, g.slurmNode)
	}
	if d.life {
		c.lifeQ.Add(o.key())
	}
	if d.submit {
		c.submitQ.Add(o.key())
	}
	return d.decision
}

// Gate decides for a pod about to enter the scheduling queue, as Place
// does (queueing its submission), and says whether it should wait outside
// the queue: while the first ask to Slurm for its job is in flight. After
// a failed ask it is not gated, so a cycle shows why it waits.
func (c *manager) Gate(pod *corev1.Pod) (string, bool) {
	d := c.Place(pod)
	if d.Node != "" {
		return "", false
	}
	return d.Message, c.rec.gated(pod)
}

// NodeEventHandler wakes pods: a Node added, or whose labels, taints or cordon
// changed, and a ResourceSlice added or changed, may let a pod that no Slurm
// node fitted, or whose constrained job Slurm refused, run now: they are
// placed again.
func (c *manager) NodeEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.wakeConstrained(nil) },
		UpdateFunc: func(old, o any) {
			a, ok1 := old.(*corev1.Node)
			b, ok2 := o.(*corev1.Node)
			if !ok1 || !ok2 || !labels.Equals(a.Labels, b.Labels) || a.Spec.Unschedulable != b.Spec.Unschedulable ||
				!equality.Semantic.DeepEqual(a.Spec.Taints, b.Spec.Taints) {
				c.wakeConstrained(nil)
			}
		},
	}
}

// wakeConstrained places again the pods no Slurm node fitted and those
// whose job, which left nodes out, Slurm refused; jobs waiting in Slurm's
// queue have the nodes they leave out worked out again. Only the
// placements with a pod only says (nil: all) are concerned.
func (c *manager) wakeConstrained(only func(*corev1.Pod) bool) {
	wake, again := c.rec.unconstrain(only, c.fitter.fit != nil)
	for _, key := range again {
		c.lifeQ.Add(key)
	}
	c.activate(wake)
}

func (c *manager) invalidRequest(pod *corev1.Pod, err error) {
	if last := c.rec.invalid(pod.UID, err.Error()); last != err.Error() {
		reason := keys.EventInvalidRequest
		if errors.Is(err, errPolicy) {
			reason = keys.EventPolicyRefused
		}
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, keys.ActionSchedule, "%v", err)
	}
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podChanged takes informer events for onepool's pods. The scheduling
// queue itself requeues a pod whose ask changed (askChangedHint); here a
// changed ask clears what was decided on the old one.
func (c *manager) podChanged(old, pod *corev1.Pod) {
	o := ownerOf(pod)
	ch, ok := c.rec.changed(old, pod)
	if !ok {
		return
	}
	if ch.bound > 0 {
		c.metrics.submitToBound.Observe(ch.bound.Seconds())
	}
	if ch.warn != "" {
		c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, keys.EventTimeLimit, keys.ActionSchedule, "%s", ch.warn)
	}
	if len(ch.wake) > 0 {
		c.activate(ch.wake)
	}
	if finished(pod) {
		c.lifeQ.Add(o.key())
	}
}

// podDeleted takes informer deletions.
func (c *manager) podDeleted(pod *corev1.Pod) {
	c.rec.deleted(pod.UID)
	c.retry.forget(pod)
	c.lifeQ.Add(ownerOf(pod).key())
}

// askChanged says whether what a pod asks of Slurm changed.
func askChanged(a, b *corev1.Pod) bool {
	for _, k := range []string{keys.AnnotationJobPartition, keys.AnnotationJobQOS, keys.AnnotationJobAccount, keys.AnnotationJobTimeLimit} {
		if a.Annotations[k] != b.Annotations[k] {
			return true
		}
	}
	return false
}

// podsGone asks the API server (not the informer) whether the owner's
// pods are gone: deleted, replaced by another uid, or finished. Of a
// gang, only the pods counts says are its job's count.
func podsGone(ctx context.Context, kube kubernetes.Interface, o owner, counts func(types.UID) bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !o.group() {
		p, err := kube.CoreV1().Pods(o.Namespace).Get(ctx, o.Name, metav1GetOptions)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, err
		}
		return p.UID != o.UID || finished(p), nil
	}
	list, err := kube.CoreV1().Pods(o.Namespace).List(ctx, listOf(o))
	if err != nil {
		return false, err
	}
	for i := range list.Items {
		if !finished(&list.Items[i]) && counts(list.Items[i].UID) {
			return false, nil
		}
	}
	return true, nil
}
