package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeSlurm struct {
	mu        sync.Mutex
	cancelled []uint32
	submitted []slurmrest.JobSubmit
	reject    error // when set, every submission fails with it
	allocated []slurmrest.JobSubmit
	// allocate answers AllocateNow (nil: refused, nodes busy).
	allocate func(slurmrest.JobSubmit) (uint32, error)
	jobs     map[uint32]*slurmrest.Job // what GetJob finds
	updated  []jobUpdate
	// onSubmit runs in SubmitJob, before it answers (outside its lock).
	onSubmit func()
}

func (f *fakeSlurm) AllocateNow(_ context.Context, j slurmrest.JobSubmit) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocated = append(f.allocated, j)
	if f.allocate == nil {
		return 0, busy
	}
	return f.allocate(j)
}

// busy is Slurm's answer to an allocation it cannot grant now, as the lab's
// slurmrestd sent it (testdata allocate_busy.500.json).
var busy = &slurmrest.APIError{Op: "allocate job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
	Errors: []slurmrest.SlurmError{{Errno: 2016, Error: "Requested nodes are busy"}}}

func (f *fakeSlurm) SubmitJob(_ context.Context, j slurmrest.JobSubmit) (uint32, error) {
	if f.onSubmit != nil {
		f.onSubmit()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, j)
	if f.reject != nil {
		return 0, f.reject
	}
	return uint32(100 + len(f.submitted)), nil
}
func (f *fakeSlurm) CancelJob(_ context.Context, id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return nil
}
func (f *fakeSlurm) GetJob(_ context.Context, id uint32) (*slurmrest.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j, ok := f.jobs[id]; ok {
		c := *j
		return &c, nil
	}
	return nil, slurmrest.ErrNotFound
}
func (f *fakeSlurm) JobStates(context.Context, []uint32) ([]slurmrest.JobStateEntry, error) {
	return nil, nil
}
func (f *fakeSlurm) UpdateJob(_ context.Context, id uint32, u slurmrest.JobUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = append(f.updated, jobUpdate{id, u})
	return nil
}

type jobUpdate struct {
	id uint32
	u  slurmrest.JobUpdate
}

type fakeJobs struct {
	stale     bool
	refreshes atomic.Int32
	lastSync  atomic.Int64             // LastSync, unix nanoseconds
	listed    map[uint32]slurmrest.Job // what Job finds; set before use
}

func (f *fakeJobs) Job(id uint32) (slurmrest.Job, error) {
	if j, ok := f.listed[id]; ok {
		return j, nil
	}
	return slurmrest.Job{}, slurmrest.ErrNotFound
}
func (f *fakeJobs) Stale() bool             { return f.stale }
func (f *fakeJobs) RefreshJobs()            { f.refreshes.Add(1) }
func (f *fakeJobs) JobsListedAt() time.Time { return time.Unix(0, f.lastSync.Load()) }
func (f *fakeJobs) Track(uint32)            {}
func (f *fakeJobs) synced()                 { f.lastSync.Store(time.Now().UnixNano()) }

type coreFixture struct {
	core  *manager
	slurm *fakeSlurm
	jobs  *fakeJobs
	kube  *fake.Clientset
	pod   *corev1.Pod
	woken []string
}

// standby makes the manager a replica that does not hold the lease, as every
// part of it sees.
func (f *coreFixture) standby() {
	g := NewLeaderGate()
	f.core.leader, f.core.rel.leader, f.core.life.leader, f.core.sub.leader = g, g, g, g
}

// record sends the events of every part of the manager to rec.
func (f *coreFixture) record(rec events.EventRecorder) {
	f.core.recorder, f.core.sub.recorder, f.core.life.recorder, f.core.claimer.recorder = rec, rec, rec, rec
}

func newCoreFixture(t *testing.T) *coreFixture {
	pod := podWith(nil, 1, "", "")
	pod.Spec.SchedulerName = "onepool"
	pod.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		ResourceGPU: *resource.NewQuantity(8, resource.DecimalSI), corev1.ResourceCPU: *resource.NewQuantity(64, resource.DecimalSI)}}}
	kube := fake.NewSimpleClientset(pod, node)
	inf := informers.NewSharedInformerFactory(kube, 0)
	if err := inf.Core().V1().Nodes().Informer().GetIndexer().Add(node); err != nil {
		t.Fatal(err)
	}
	f := &coreFixture{slurm: &fakeSlurm{}, jobs: &fakeJobs{}, kube: kube, pod: pod}
	fit, err := NewNodeFit(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.core, err = newManager(managerConfig{
		Fit: fit, SlurmNodes: func(context.Context, []string) (map[string]bool, error) {
			return map[string]bool{"gpu-1": true, "gpu-2": true}, nil
		},
		Args: testArgs(t), Log: klog.Background(), Slurm: f.slurm, Jobs: f.jobs, Kube: kube,
		Nodes: inf.Core().V1().Nodes().Lister(), Recorder: events.NewFakeRecorder(100), PlaceholderKey: testKey,
		Activate: func(ps []*corev1.Pod) {
			for _, p := range ps {
				f.woken = append(f.woken, p.Name)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.core.rec.s.synced = true
	f.core.podChanged(nil, pod)
	t.Cleanup(func() { f.core.submitQ.ShutDown(); f.core.lifeQ.ShutDown(); f.core.retry.q.ShutDown() })
	return f
}

func (f *coreFixture) job(id uint32, state string, nodes string) slurmrest.Job {
	return slurmrest.Job{ID: id, Comment: f.core.proof.comment(ownerOf(f.pod), ""), State: slurmrest.JobState{state}, Nodes: nodes, SubmitTime: time.Now()}
}

func TestCoreAdoptsARunningJobAndBindsWithoutSubmitting(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	d := f.core.Place(f.pod)
	if d.Node != "gpu-1" {
		t.Fatalf("Place = %+v, want gpu-1", d)
	}
	if f.core.submitQ.Len() != 0 {
		t.Error("an adopted pod was queued for a new submission")
	}
	if !slices.Contains(f.woken, "p") {
		t.Error("the pod was not woken when its job started")
	}
}

func TestCorePendingMessageNamesJobAndReason(t *testing.T) {
	f := newCoreFixture(t)
	j := f.job(8, slurmrest.JobPending, "")
	j.Reason = "Priority"
	f.core.book.observe(j)
	if d := f.core.Place(f.pod); d.Node != "" || !strings.Contains(d.Message, "job 8 is PENDING (Priority)") {
		t.Fatalf("Place = %+v", d)
	}
}

func TestCoreKeepsOlderOfTwoLiveJobsAndCancelsTheOther(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(9, slurmrest.JobRunning, "gpu-1"))
	f.core.book.observe(f.job(7, slurmrest.JobPending, ""))
	if _, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.slurm.cancelled, []uint32{9}) {
		t.Fatalf("cancelled %v, want [9]", f.slurm.cancelled)
	}
	if got := f.core.rec.s.places[ownerOf(f.pod).key()].jobID; got != 7 {
		t.Errorf("kept job %d, want 7", got)
	}
}

func TestCoreEvictsPodWhoseJobEnded(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	j := f.job(7, "PREEMPTED", "gpu-1")
	f.core.book.observe(j)
	if d := f.core.Place(f.pod); d.Node != "" || !strings.Contains(d.Message, "PREEMPTED") {
		t.Fatalf("a pod whose job ended may still bind: %+v", d)
	}
	if _, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key()); err != nil {
		t.Fatal(err)
	}
	evicted := false
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			evicted = true
		}
	}
	if !evicted || len(f.slurm.cancelled) != 0 {
		t.Fatalf("evicted=%v cancelled=%v; want an eviction and no cancel", evicted, f.slurm.cancelled)
	}
}

func TestCoreCancelsJobOfPodThatIsGone(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	if err := f.kube.CoreV1().Pods("ns").Delete(context.Background(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.core.podDeleted(f.pod)
	if _, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.slurm.cancelled, []uint32{7}) {
		t.Fatalf("cancelled %v, want [7]", f.slurm.cancelled)
	}
}

func TestCoreDoesNothingWhileSlurmIsUnknown(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	f.core.book.observe(f.job(7, slurmrest.JobCancelled, "gpu-1"))
	f.jobs.stale = true
	after, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
	if err != nil || after == 0 {
		t.Fatalf("reconcile while stale = %v, %v; want a later look", after, err)
	}
	for _, a := range f.kube.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Fatalf("acted while Slurm's state is unknown: %v", a)
		}
	}
	other := podWith(nil, 1, "", "")
	other.Name, other.UID = "q", "u2"
	if d := f.core.Place(other); !strings.Contains(d.Message, "unknown") || f.core.submitQ.Len() != 0 {
		t.Fatalf("Place while stale = %+v, queued %d", d, f.core.submitQ.Len())
	}
}

// A submission Slurm refuses still leaves a FAILED job record with
// onepool's comment. That record is never the pod's placement: the pod
// stays Pending with Slurm's reason in words, and nothing is evicted.
func TestCoreRejectedSubmitLeavesPodPendingWithTheReason(t *testing.T) {
	f := newCoreFixture(t)
	f.pod.Spec.Containers[0].Resources.Limits[ResourceGPU] = *resource.NewQuantity(9, resource.DecimalSI)
	f.pod.Spec.Containers[0].Resources.Requests[ResourceGPU] = *resource.NewQuantity(9, resource.DecimalSI)
	f.core.podChanged(nil, f.pod)
	f.slurm.reject = &slurmrest.APIError{Op: "submit job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
		Errors: []slurmrest.SlurmError{{Errno: slurmrest.ErrnoNodeConfigUnavailable, Description: "Batch job submission failed"}}}
	key := ownerOf(f.pod).key()
	f.core.Place(f.pod)
	queued, _ := f.core.submitQ.Get() // as a submit worker would
	if err := f.core.sub.submit(context.Background(), queued); err != nil {
		t.Fatalf("submit: %v", err)
	}
	f.core.submitQ.Done(queued)
	// Slurm's record of the refused job, as the cache lists it.
	leftover := f.job(41, slurmrest.JobFailed, "")
	leftover.Reason = "BadConstraints"
	f.core.book.observe(leftover)
	if _, err := f.core.life.reconcile(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" || a.GetVerb() == "delete" {
			t.Fatalf("the pod was evicted for a job that never ran: %v", a)
		}
	}
	d := f.core.Place(f.pod)
	for _, want := range []string{"Slurm rejected the placeholder job", "Slurm can never run it", "9 nvidia.com/gpu",
		`partition "main"`, "the largest node offers 8 nvidia.com/gpu", "slurm error 2014"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("pending message lacks %q: %s", want, d.Message)
		}
	}
	// No retry storm: Place asks for no new submission before the
	// refusal's delay has passed.
	for range 5 {
		f.core.Place(f.pod)
	}
	if n := f.core.submitQ.Len(); n != 0 || len(f.slurm.submitted) != 1 {
		t.Errorf("after a rejection: %d queued, %d submitted; want 0 and 1", n, len(f.slurm.submitted))
	}
	// Once it has (a node may have registered since), the retry queue
	// wakes the pod, and its cycle asks Slurm again; a second refusal
	// waits twice as long.
	p := f.core.rec.s.places[key]
	assert.Equal(t, 1, p.rejections)
	assert.Equal(t, []string{"p"}, names(f.core.retry.st.due(retryItem{Owner: key})))
	p.errAt = time.Now().Add(-rejectDelay(1))
	f.core.Place(f.pod)
	queued, _ = f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), queued))
	f.core.submitQ.Done(queued)
	assert.Len(t, f.slurm.submitted, 2, "asked again after the delay")
	assert.Equal(t, 2, p.rejections)
	p.errAt = time.Now().Add(-rejectDelay(1))
	f.core.Place(f.pod)
	assert.Zero(t, f.core.submitQ.Len(), "the second refusal waits longer")
	// A job granted ends the refusals, and the retry wakes nobody.
	f.slurm.reject = nil
	p.errAt = time.Now().Add(-rejectDelay(2))
	f.core.Place(f.pod)
	queued, _ = f.core.submitQ.Get()
	require.NoError(t, f.core.sub.submit(context.Background(), queued))
	f.core.submitQ.Done(queued)
	assert.Zero(t, p.rejections)
	assert.Empty(t, f.core.retry.st.due(retryItem{Owner: key}))
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestRejectDelayDoublesUpToRejectRetry(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second,
		5: 160 * time.Second, 6: 5 * time.Minute, 40: 5 * time.Minute} {
		assert.Equal(t, want, rejectDelay(n), "refusal %d", n)
	}
}

// A job adopted from Slurm (the replica that submitted it died before it
// wrote the pod's annotation) is recorded on the pod.
func TestCoreRecordsAnAdoptedJobOnThePod(t *testing.T) {
	f := newCoreFixture(t)
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	if _, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key()); err != nil {
		t.Fatal(err)
	}
	p, err := f.kube.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Annotations[keys.AnnotationJobID]; got != "7" {
		t.Fatalf("job-id annotation %q, want 7", got)
	}
}

// A job Slurm started on a node cordoned before the drain reached Slurm
// is given back (cancelled, never adopted again) and a new one asked for;
// a pod that tolerates the cordon is bound there.
func TestCoreGivesBackAJobOnACordonedNode(t *testing.T) {
	f := newCoreFixture(t)
	node, err := f.core.fitter.nodes.Get("gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = true
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
	d := f.core.Place(f.pod)
	if d.Node != "" || !strings.Contains(d.Message, "job 7 started on gpu-1, where the pod cannot run (node(s) were unschedulable)") {
		t.Fatalf("Place = %+v", d)
	}
	if f.core.submitQ.Len() != 1 {
		t.Errorf("no new submission queued (queue %d)", f.core.submitQ.Len())
	}
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1")) // the cache, before the cancel lands
	if d := f.core.Place(f.pod); d.Node != "" {
		t.Fatalf("the given-back job was adopted again: %+v", d)
	}
	if _, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.slurm.cancelled, 7) {
		t.Errorf("job 7 not cancelled: %v", f.slurm.cancelled)
	}

	tolerant := newCoreFixture(t)
	tn, _ := tolerant.core.fitter.nodes.Get("gpu-1")
	tn.Spec.Unschedulable = true
	tolerant.pod.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	tolerant.core.podChanged(nil, tolerant.pod)
	tolerant.core.book.observe(tolerant.job(9, slurmrest.JobRunning, "gpu-1"))
	if d := tolerant.core.Place(tolerant.pod); d.Node != "gpu-1" {
		t.Errorf("a pod that tolerates the cordon: Place = %+v", d)
	}
}

// Node filters without the Nodes and Slurm's node names to tell Slurm
// their verdicts are a configuration error, not a panic at the first pod.
func TestNewCoreRefusesFiltersWithoutNodeNames(t *testing.T) {
	fit, err := NewNodeFit(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newManager(managerConfig{Fit: fit, Args: testArgs(t), Log: klog.Background()})
	if err == nil || !strings.Contains(err.Error(), "need Nodes and SlurmNodes") {
		t.Fatalf("newManager with Fit alone: %v", err)
	}
}

// A pod whose Slurm settings change while its job is being asked for is
// judged again: the refusal of its old settings is not kept (chart-mode
// CI saw a pod whose fixed annotation still showed the old refusal, for
// the scheduling queue placed the new pod before onepool's informer had it).
func TestCoreAskChangedDuringSubmitIsAskedAgain(t *testing.T) {
	f := newCoreFixture(t)
	f.pod.Annotations = map[string]string{keys.AnnotationJobPartition: "gone"}
	f.core.podChanged(nil, f.pod)
	fixed := f.pod.DeepCopy()
	fixed.Annotations[keys.AnnotationJobPartition] = "main"
	f.slurm.reject = &slurmrest.APIError{Op: "submit job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
		Errors: []slurmrest.SlurmError{{Errno: 2015, Error: "Invalid partition name specified"}}}
	f.slurm.onSubmit = func() {
		f.slurm.onSubmit = nil
		f.core.podChanged(f.pod, fixed) // the informer, while Slurm answers
	}
	f.core.Place(fixed) // the cycle has the new pod; onepool's copy is the old one
	key, _ := f.core.submitQ.Get()
	err := f.core.sub.submit(context.Background(), key)
	f.core.submitQ.Done(key)
	if !errors.Is(err, errRetry) {
		t.Fatalf("submit judged the old settings and returned %v; want a retry", err)
	}
	p := f.core.rec.s.places[key]
	if p.rejected || !errors.Is(p.err, errAskMoved) {
		t.Fatalf("placement kept rejected=%v err=%v", p.rejected, p.err)
	}
	f.slurm.reject = nil
	if err := f.core.sub.submit(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if n := len(f.slurm.submitted); n != 2 || f.slurm.submitted[1].Partition != "main" {
		t.Fatalf("submissions %+v; want the second in partition main", f.slurm.submitted)
	}
}
