package scheduler

import (
	"context"
	"errors"
	"fmt"
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

// fixedGroups answers every PodGroup with g (or err).
type fixedGroups struct {
	g   Group
	err error
}

func (f fixedGroups) Group(context.Context, string, string) (Group, error) { return f.g, f.err }

// gangFixture is the core fixture with PodGroup "trio" of minMember 3 and
// no member yet (the fixture's own pod is gone).
func gangFixture(t *testing.T, groups GroupReader) *coreFixture {
	t.Helper()
	f := newCoreFixture(t)
	f.core.groups = groups
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
	return f.core.submit(context.Background(), key)
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
	gang := owner{Namespace: "ns", Name: "trio", UID: "pg-uid", Group: true}
	assert.Equal(t, f.core.proof.comment(gang, ""), j.Comment, "signed for the PodGroup's uid")

	// Slurm runs it on three nodes; each has a Kubernetes node.
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		require.NoError(t, idx.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	f.core.nodes = corelisters.NewNodeLister(idx)
	running := slurmrest.Job{ID: 101, Comment: j.Comment, State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-[1-3]", SubmitTime: time.Now()}
	f.core.observe(running)
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
