package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// fixedGroups answers every PodGroup with g (or err); with lws set, every
// LeaderWorkerSet and JobSet instead, and no PodGroup exists.
type fixedGroups struct {
	g   Group
	err error
	lws bool
}

func (f fixedGroups) JobSet(_ context.Context, _, name, _ string) (Group, error) {
	if !f.lws {
		return Group{}, fmt.Errorf("jobsets %q not found", name)
	}
	return f.g, f.err
}

func (f fixedGroups) PodGroup(_ context.Context, _, name string) (Group, error) {
	if f.lws {
		return Group{}, fmt.Errorf("podgroups %q not found", name)
	}
	return f.g, f.err
}

func (f fixedGroups) LeaderWorkerSet(_ context.Context, _, name string) (Group, error) {
	if !f.lws {
		return Group{}, fmt.Errorf("leaderworkersets %q not found", name)
	}
	return f.g, f.err
}

// gangFixture is the core fixture with PodGroup "trio" of minMember 3 and
// no member yet (the fixture's own pod is gone).
func gangFixture(t *testing.T, groups GroupReader) *coreFixture {
	t.Helper()
	f := newCoreFixture(t)
	f.core.sub.groups = groups
	f.core.podDeleted(f.pod)
	return f
}

func (f *coreFixture) addMember(i int, gpus int64) *corev1.Pod {
	p := podWith(nil, gpus, "", "")
	p.Name, p.UID = fmt.Sprintf("trio-%d", i), types.UID(fmt.Sprintf("m%d", i))
	p.Labels = map[string]string{keys.LabelPodGroup: "trio"}
	p.Spec.SchedulerName = keys.SchedulerName
	p.CreationTimestamp.Time = time.Now().Add(-time.Minute)
	f.core.podChanged(nil, p)
	return p
}

// submitGang runs one submission of the gang as a submit worker does.
func (f *coreFixture) submitGang(t *testing.T, anyMember *corev1.Pod) error {
	t.Helper()
	f.core.Place(anyMember)
	key, _ := f.core.submitQ.Get()
	defer f.core.submitQ.Done(key)
	return f.core.sub.submit(context.Background(), key)
}

// A gang waits for its PodGroup's minMember pods, then gets one job of
// that many nodes, named and signed for the PodGroup; each pod takes its
// own node of the allocation, and a replacement pod takes the node its
// predecessor left.
func TestCoreGangGetsOneJobAndANodeEach(t *testing.T) {
	f := gangFixture(t, fixedGroups{g: Group{UID: "pg-uid", MinMember: 3}})
	m0, m1 := f.addMember(0, 4), f.addMember(1, 4)
	require.NoError(t, f.submitGang(t, m0))
	assert.Empty(t, f.slurm.submitted, "two of three pods: nothing asked of Slurm")
	assert.Equal(t, "waiting for PodGroup ns/trio: 2 of its 3 pods exist", f.core.Place(m1).Message)

	m2 := f.addMember(2, 4)
	require.NoError(t, f.submitGang(t, m2))
	require.Len(t, f.slurm.submitted, 1)
	j := f.slurm.submitted[0]
	assert.Equal(t, "onepool/ns/trio", j.Name)
	assert.Equal(t, "3", j.Nodes)
	assert.Equal(t, 3, j.Tasks)
	assert.Equal(t, "gres/gpu:4", j.TresPerNode)
	gang := owner{Kind: kindPodGroup, Namespace: "ns", Name: "trio", UID: "pg-uid"}
	assert.Equal(t, f.core.proof.comment(gang, ""), j.Comment, "signed for the PodGroup's uid")

	// Slurm runs it on three nodes; each has a Kubernetes node.
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		require.NoError(t, idx.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	f.core.fitter.nodes = corelisters.NewNodeLister(idx)
	running := slurmrest.Job{ID: 101, Comment: j.Comment, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-[1-3]", SubmitTime: time.Now()}
	f.core.book.observe(running)
	seen := map[string]string{}
	for _, m := range []*corev1.Pod{m0, m1, m2} {
		d := f.core.Place(m)
		require.NotEmpty(t, d.Node, "%s: %s", m.Name, d.Message)
		assert.NotContains(t, seen, d.Node, "two pods on one node of the job")
		seen[d.Node] = m.Name
		assert.Equal(t, d, f.core.Place(m), "a pod keeps its node")
	}
	extra := f.addMember(3, 4)
	assert.Contains(t, f.core.Place(extra).Message, "every node of it already has a pod of this group")

	// trio-1 is replaced: its node goes to the newcomer.
	var freed string
	for n, name := range seen {
		if name == "trio-1" {
			freed = n
		}
	}
	f.core.podDeleted(m1)
	assert.Equal(t, freed, f.core.Place(extra).Node)
}

// One job gives every node the same allocation: members asking different
// resources are refused with the reason, and Slurm is not asked.
func TestCoreGangMembersMustAskTheSame(t *testing.T) {
	f := gangFixture(t, fixedGroups{g: Group{UID: "pg-uid", MinMember: 2}})
	m0 := f.addMember(0, 4)
	m1 := f.addMember(1, 4)
	m1.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("8")
	f.core.podChanged(nil, m1)
	require.NoError(t, f.submitGang(t, m0))
	assert.Empty(t, f.slurm.submitted)
	msg := f.core.Place(m0).Message
	assert.Contains(t, msg, "the pods of PodGroup ns/trio ask different resources or Slurm settings")
	assert.True(t, strings.HasPrefix(msg, "Slurm rejected the placeholder job"), msg)
}

// A PodGroup that cannot be read keeps the gang waiting with the reason,
// and it is asked again later (not a rejection).
func TestCoreGangWaitsForItsPodGroup(t *testing.T) {
	f := gangFixture(t, fixedGroups{err: errors.New(`podgroups "trio" not found`)})
	m0 := f.addMember(0, 1)
	require.NoError(t, f.submitGang(t, m0))
	assert.Empty(t, f.slurm.submitted)
	assert.Equal(t, `waiting for PodGroup ns/trio: podgroups "trio" not found`, f.core.Place(m0).Message)
	assert.Equal(t, 1, f.core.submitQ.Len(), "a waiting gang is looked at again at its next cycle")
}

// A submission decides under the lock whether it is retried: the pods it
// wakes may run a cycle at once (Place, from the framework's Activate),
// which marks the gang as being submitted again. Reading that mark after
// the lock was let go was a data race (go test -race on the integration
// suite) and made an incomplete gang a failure to retry with backoff.
func TestCoreSubmitDecidesItsRetryUnderTheLock(t *testing.T) {
	f := gangFixture(t, fixedGroups{g: Group{UID: "pg-uid", MinMember: 2}})
	m0 := f.addMember(0, 1)
	f.core.activate = func(ps []*corev1.Pod) {
		for _, p := range ps {
			f.core.Place(p) // the woken pod's cycle, before submit returns
		}
	}
	assert.NoError(t, f.submitGang(t, m0), "waiting for the gang is no failure")
	assert.Empty(t, f.slurm.submitted)
	assert.Equal(t, 1, f.core.submitQ.Len(), "the woken cycle queued the next look")
}

// lwsMember adds pod name of LeaderWorkerSet "vllm", group index group,
// as LeaderWorkerSet's controller and webhook label it.
func (f *coreFixture) lwsMember(name, group string, gpus int64) *corev1.Pod {
	p := podWith(nil, gpus, "", "")
	p.Name, p.UID = name, types.UID("uid-"+name)
	p.Labels = map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: group}
	p.Annotations = map[string]string{"leaderworkerset.sigs.k8s.io/size": "9"} // not trusted: the object says 2
	p.Spec.SchedulerName = keys.SchedulerName
	p.CreationTimestamp.Time = time.Now().Add(-time.Minute)
	f.core.podChanged(nil, p)
	return p
}

// A LeaderWorkerSet group (leader and workers) is one gang of the size
// its LeaderWorkerSet says, not its pods' annotation: one job named and
// signed for the group; another group of the same set is another gang.
func TestCoreLeaderWorkerSetGroupIsOneGang(t *testing.T) {
	f := gangFixture(t, fixedGroups{g: Group{UID: "lws-uid", MinMember: 2}, lws: true})
	leader := f.lwsMember("vllm-0", "0", 8)
	other := f.lwsMember("vllm-1", "1", 8)
	require.NoError(t, f.submitGang(t, leader))
	assert.Empty(t, f.slurm.submitted, "the leader alone: nothing asked of Slurm")
	assert.Equal(t, "waiting for LeaderWorkerSet ns/vllm group 0: 1 of its 2 pods exist", f.core.Place(leader).Message)

	worker := f.lwsMember("vllm-0-1", "0", 8)
	require.NoError(t, f.submitGang(t, worker))
	require.Len(t, f.slurm.submitted, 1)
	j := f.slurm.submitted[0]
	assert.Equal(t, "onepool/ns/vllm/0", j.Name)
	assert.Equal(t, "2", j.Nodes)
	assert.Equal(t, "gres/gpu:8", j.TresPerNode)
	gang := owner{Kind: kindLWS, Namespace: "ns", Name: "vllm", Index: "0", UID: "lws-uid"}
	assert.Equal(t, f.core.proof.comment(gang, ""), j.Comment, "signed for the group, with the LeaderWorkerSet's uid")
	require.NoError(t, f.submitGang(t, other))
	assert.Len(t, f.slurm.submitted, 1, "group 1 is a gang of its own, not yet whole")
	assert.Equal(t, "waiting for LeaderWorkerSet ns/vllm group 1: 1 of its 2 pods exist", f.core.Place(other).Message)
}

// Which gang a pod is in: a PodGroup's label first, then a LeaderWorkerSet
// group's labels; labels that do not name a group leave a pod alone.
func TestOwnerOfGangs(t *testing.T) {
	pod := func(l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Labels: l}}
	}
	for name, tc := range map[string]struct {
		labels map[string]string
		want   owner
	}{
		"a pod":     {nil, owner{Namespace: "ns", Name: "p", UID: "u"}},
		"PodGroup":  {map[string]string{keys.LabelPodGroup: "trio"}, owner{Kind: kindPodGroup, Namespace: "ns", Name: "trio"}},
		"LWS group": {map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "3"}, owner{Kind: kindLWS, Namespace: "ns", Name: "vllm", Index: "3"}},
		"both: the PodGroup asked for": {map[string]string{keys.LabelPodGroup: "trio", keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "3"},
			owner{Kind: kindPodGroup, Namespace: "ns", Name: "trio"}},
		"LWS name without an index": {map[string]string{keys.LabelLWSName: "vllm"}, owner{Namespace: "ns", Name: "p", UID: "u"}},
		"an index that is no number": {map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "0,1"},
			owner{Namespace: "ns", Name: "p", UID: "u"}},
		"a JobSet's pod that does not ask for a gang": {map[string]string{keys.LabelJobSetName: "train", keys.LabelJobSetReplicatedJob: "workers", keys.LabelJobSetRestartAttempt: "0"},
			owner{Namespace: "ns", Name: "p", UID: "u"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := ownerOf(pod(tc.labels))
			assert.Equal(t, tc.want, o)
			assert.True(t, o.has(pod(tc.labels)), "a pod is one of its owner's")
		})
	}
	g := ownerOf(pod(map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "3"}))
	assert.False(t, g.has(pod(map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "4"})), "another group of the set")
	assert.False(t, g.has(pod(map[string]string{keys.LabelLWSName: "vllm2", keys.LabelLWSGroupIndex: "3"})), "another set")
	elsewhere := pod(map[string]string{keys.LabelLWSName: "vllm", keys.LabelLWSGroupIndex: "3"})
	elsewhere.Namespace = "other"
	assert.False(t, g.has(elsewhere), "another namespace")
}

// A gang's pods made after its job closed are not the job's. The
// LeaderWorkerSet bench showed it: a group's job is preempted (or its pods are
// deleted and its job cancelled), LeaderWorkerSet makes the group again at
// once under the same names, and the new pods were taken for the job's:
// bound to the nodes it was giving up, then evicted for its end. Now they
// wait, unbound and not evicted, until it is over, then get a job of their
// own; the job's own pods are evicted as before.
func TestCoreGangMadeAgainAfterItsJobClosedWaitsForAJobOfItsOwn(t *testing.T) {
	for _, how := range []string{"preempted", "its pods deleted"} {
		t.Run(how, func(t *testing.T) {
			f := gangFixture(t, fixedGroups{g: Group{UID: "lws-uid", MinMember: 2}, lws: true})
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, n := range []string{"gpu-1", "gpu-2"} {
				require.NoError(t, idx.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}))
			}
			f.core.fitter.nodes = corelisters.NewNodeLister(idx)
			leader, worker := f.lwsMember("vllm-0", "0", 8), f.lwsMember("vllm-0-1", "0", 8)
			require.NoError(t, f.submitGang(t, leader))
			require.Len(t, f.slurm.submitted, 1)
			job := slurmrest.Job{ID: 101, Comment: f.slurm.submitted[0].Comment, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-[1-2]", SubmitTime: time.Now()}
			f.core.book.observe(job)
			for _, m := range []*corev1.Pod{leader, worker} {
				require.NotEmpty(t, f.core.Place(m).Node, m.Name)
			}
			key := ownerOf(leader).key()

			if how == "preempted" {
				job.PreemptTime = time.Now()
				f.core.book.observe(job)
				_, err := f.core.life.reconcile(context.Background(), key)
				require.NoError(t, err)
				assert.True(t, f.evicted(), "the job's own pods are evicted")
			}
			f.core.podDeleted(leader)
			f.core.podDeleted(worker)
			if how == "its pods deleted" {
				// onepool sees them gone and cancels the job before the new
				// pods come (new pods that came first would take the nodes
				// as replacements do).
				_, err := f.core.life.reconcile(context.Background(), key)
				require.NoError(t, err)
			}
			f.kube.ClearActions()
			// LeaderWorkerSet makes the group again, same names, new pods.
			leader2 := f.lwsMember("vllm-0", "0", 8)
			leader2.UID = "uid-vllm-0-again"
			f.core.podChanged(nil, leader2)
			worker2 := f.lwsMember("vllm-0-1", "0", 8)
			worker2.UID = "uid-vllm-0-1-again"
			f.core.podChanged(nil, worker2)
			for _, m := range []*corev1.Pod{leader2, worker2} {
				d := f.core.Place(m)
				assert.Empty(t, d.Node, "%s bound to the closed job", m.Name)
				assert.Contains(t, d.Message, "Slurm job 101 was for the earlier pods of LeaderWorkerSet ns/vllm group 0 and takes no more")
			}

			// The job's pods are gone: its job is cancelled (if running),
			// the new pods untouched.
			_, err := f.core.life.reconcile(context.Background(), key)
			require.NoError(t, err)
			assert.False(t, f.evicted(), "a pod made after the job closed is evicted for it")
			assert.Contains(t, f.slurm.cancelled, uint32(101), "the job of the pods that are gone is cancelled")
			assert.Empty(t, slices.DeleteFunc(slices.Clone(f.slurm.cancelled), func(id uint32) bool { return id == 101 }), "no other job cancelled")
			for _, m := range []*corev1.Pod{leader2, worker2} {
				assert.Contains(t, f.core.Place(m).Message, "takes no more", "%s: a pod made after the cancel waits for it", m.Name)
			}

			// Slurm ends it: the group asks for a job of its own.
			job.State, job.EndTime = slurmrest.JobState{slurmrest.JobCancelled}, time.Now()
			f.core.book.observe(job)
			_, err = f.core.life.reconcile(context.Background(), key)
			require.NoError(t, err)
			assert.False(t, f.evicted())
			require.NoError(t, f.submitGang(t, leader2))
			require.Len(t, f.slurm.submitted, 2, "the group made again gets its own job")
		})
	}
}

// A JobSet replicated job that asks for it (slurm.onepool.dev/gang) is one
// gang per restart attempt: one job of the size the JobSet says; its
// next attempt's pods are another gang; pods that do not ask are alone.
func TestCoreJobSetReplicatedJobIsOneGang(t *testing.T) {
	f := gangFixture(t, fixedGroups{g: Group{UID: "js-uid", MinMember: 2}, lws: true})
	member := func(name, attempt string, gang bool) *corev1.Pod {
		p := podWith(nil, 8, "", "")
		p.Name, p.UID = name, types.UID("uid-"+name)
		p.Labels = map[string]string{keys.LabelJobSetName: "train", keys.LabelJobSetReplicatedJob: "workers", keys.LabelJobSetRestartAttempt: attempt}
		if gang {
			p.Annotations = map[string]string{keys.AnnotationGang: keys.GangReplicatedJob}
		}
		p.Spec.SchedulerName = keys.SchedulerName
		p.CreationTimestamp.Time = time.Now().Add(-time.Minute)
		f.core.podChanged(nil, p)
		return p
	}
	w0 := member("train-workers-0-0", "0", true)
	require.NoError(t, f.submitGang(t, w0))
	assert.Empty(t, f.slurm.submitted)
	assert.Equal(t, "waiting for JobSet ns/train replicated job workers (restart attempt 0): 1 of its 2 pods exist", f.core.Place(w0).Message)
	w1 := member("train-workers-1-0", "0", true)
	require.NoError(t, f.submitGang(t, w1))
	require.Len(t, f.slurm.submitted, 1, f.core.Place(w1).Message)
	j := f.slurm.submitted[0]
	assert.Equal(t, "onepool/ns/train/workers/0", j.Name)
	assert.Equal(t, "2", j.Nodes)
	gang := owner{Kind: kindJobSet, Namespace: "ns", Name: "train", Index: "workers/0", UID: "js-uid"}
	assert.Equal(t, f.core.proof.comment(gang, ""), j.Comment)
	next := member("train-workers-0-0-again", "1", true)
	assert.Equal(t, "jobset/ns/train/workers/1", ownerOf(next).key(), "the next attempt's pod is another gang")
	alone := member("train-workers-2-0", "0", false)
	assert.Equal(t, owner{Namespace: "ns", Name: alone.Name, UID: alone.UID}, ownerOf(alone), "without the annotation a pod is placed alone")
}
