package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// fixedTenants: one policy for every namespace (or err).
type fixedTenants struct {
	p   *v1alpha1.TenantPolicy
	err error
}

func (f fixedTenants) PolicyFor(string) (*v1alpha1.TenantPolicy, error) { return f.p, f.err }

func teamPolicy(spec v1alpha1.TenantPolicySpec) *v1alpha1.TenantPolicy {
	return &v1alpha1.TenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}, Spec: spec}
}

// The scheduler refuses what the policy does not allow, even for a pod
// the webhook let in (the policy narrowed since), and submits nothing.
func TestCoreRefusesWhatTheTenantPolicyDoesNotAllow(t *testing.T) {
	f := newCoreFixture(t)
	f.core.pol.tenants = fixedTenants{p: teamPolicy(v1alpha1.TenantPolicySpec{QOS: v1alpha1.Choice{Allowed: []string{"normal"}}})}
	f.pod.Annotations = map[string]string{keys.AnnotationJobQOS: "high"}
	d := f.core.Place(f.pod)
	assert.Empty(t, d.Node)
	assert.Equal(t, `refused: TenantPolicy "team-b" does not allow QOS "high" (allowed: normal)`, d.Message)
	assert.Zero(t, f.core.submitQ.Len(), "nothing is submitted")
	ev := <-f.core.recorder.(*events.FakeRecorder).Events
	assert.True(t, strings.HasPrefix(ev, "Warning "+keys.EventPolicyRefused+" "), ev)

	f.core.pol.tenants = fixedTenants{err: tenancy.ErrNoPolicy}
	f.pod.Annotations = nil
	assert.Contains(t, f.core.Place(f.pod).Message, "refused: no TenantPolicy covers the namespace")
}

// What the policy grants goes into the job: its Slurm user and defaults.
func TestCoreSubmitsWithThePolicysUserAndDefaults(t *testing.T) {
	f := newCoreFixture(t)
	f.core.pol.tenants = fixedTenants{p: teamPolicy(v1alpha1.TenantPolicySpec{SlurmUser: "team-b",
		Accounts: v1alpha1.Choice{Default: "team-b"}, QOS: v1alpha1.Choice{Default: "normal"}})}
	r, err := f.core.pol.request(f.pod)
	require.NoError(t, err)
	assert.Equal(t, "team-b", r.User)
	assert.Equal(t, "team-b", r.Account)
	assert.Equal(t, "normal", r.QOS)
	assert.Equal(t, "main", r.Partition, "the scheduler's default where the policy has none")
	require.NoError(t, f.core.sub.submit(context.Background(), placeFor(f.core, f.pod)))
	require.Len(t, f.slurm.submitted, 1)
	assert.Equal(t, "team-b", f.slurm.submitted[0].Account)
}

// A team at its GPU cap waits; when one of its jobs goes, the waiting
// pod is woken and submitted.
func TestCoreTenantGPUCap(t *testing.T) {
	f := newCoreFixture(t) // f.pod asks 1 GPU
	f.core.pol.tenants = fixedTenants{p: teamPolicy(v1alpha1.TenantPolicySpec{MaxGPUs: 1})}
	f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))

	second := podWith(nil, 1, "", "")
	second.Name, second.UID = "q", types.UID("u2")
	second.Spec.SchedulerName = "onepool"
	f.core.podChanged(nil, second)
	key := placeFor(f.core, second)
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	assert.Empty(t, f.slurm.submitted, "the cap holds the second pod")
	assert.Contains(t, f.core.Place(second).Message, `waiting for GPUs under TenantPolicy "team-b": its pods hold 1 of its 1, this one asks 1`)

	// The first pod and its job go.
	f.core.podDeleted(f.pod)
	f.core.book.observe(f.job(7, "COMPLETED", "gpu-1"))
	f.woken = nil
	f.core.life.dropIfIdle(ownerOf(f.pod).key(), f.core.rec.s.places[ownerOf(f.pod).key()])
	assert.Contains(t, f.woken, "q", "the waiting pod is woken")
	require.NoError(t, f.core.sub.submit(context.Background(), key))
	assert.Len(t, f.slurm.submitted, 1, "and submitted")
}

// placeFor runs a scheduling cycle for pod and takes its placement off
// the submit queue, as a submit worker would; it returns the key.
func placeFor(c *manager, pod *corev1.Pod) string {
	c.Place(pod)
	key, _ := c.submitQ.Get()
	c.submitQ.Done(key)
	return key
}

// A pod whose namespace the scheduler's cache has not seen yet is not
// judged by its name alone (its labels may select a narrower policy than
// the default): it waits, and is placed again when the namespace arrives
// or its labels change; pods of other namespaces are left alone.
func TestCoreWaitsForANamespaceItHasNotSeen(t *testing.T) {
	f := newCoreFixture(t)
	policies := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	teamB := teamPolicy(v1alpha1.TenantPolicySpec{QOS: v1alpha1.Choice{Allowed: []string{"normal"}}})
	teamB.Spec.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}
	open := &v1alpha1.TenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "open"}, Spec: v1alpha1.TenantPolicySpec{QOS: v1alpha1.Choice{Allowed: []string{"*"}}}}
	require.NoError(t, policies.Add(teamB))
	require.NoError(t, policies.Add(open))
	f.core.pol.tenants = InformerTenants{Policies: cache.NewGenericLister(policies, v1alpha1.Resource.GroupResource()),
		Namespaces: corelisters.NewNamespaceLister(namespaces), Default: "open"}
	f.pod.Annotations = map[string]string{keys.AnnotationJobQOS: "high"}

	d := f.core.Place(f.pod)
	assert.Equal(t, "waiting: namespace "+f.pod.Namespace+" is not in the scheduler's cache yet", d.Message,
		"not given the default policy by its name alone, nor refused")
	assert.Zero(t, f.core.submitQ.Len())
	assert.Empty(t, f.core.recorder.(*events.FakeRecorder).Events,
		"no warning event: the pod did nothing wrong (a standby taking over mid-burst warned every new pod)")
	// The namespace's event may come while the pod is between the
	// scheduling queue's queues, where waking it is lost: the pod is
	// woken again soon in any case.
	got := make(chan retryItem, 1)
	go func() {
		it, _ := f.core.retry.q.Get()
		f.core.retry.q.Done(it)
		got <- it
	}()
	select {
	case it := <-got:
		assert.Equal(t, []string{f.pod.Name}, names(f.core.retry.st.due(it)))
	case <-time.After(10 * time.Second):
		t.Fatal("a pod refused for a namespace not yet cached is not woken again")
	}

	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}
	f.core.NamespaceEventHandler().OnAdd(other, false)
	assert.Empty(t, f.woken, "another namespace wakes nobody")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.pod.Namespace, Labels: map[string]string{"team": "b"}}}
	require.NoError(t, namespaces.Add(ns))
	f.core.NamespaceEventHandler().OnAdd(ns, false)
	assert.Contains(t, f.woken, f.pod.Name, "woken when its namespace arrives")
	assert.Equal(t, `refused: TenantPolicy "team-b" does not allow QOS "high" (allowed: normal)`, f.core.Place(f.pod).Message,
		"judged by the policy its labels select")

	f.woken = nil
	relabelled := ns.DeepCopy()
	relabelled.Labels = nil
	require.NoError(t, namespaces.Update(relabelled))
	f.core.NamespaceEventHandler().OnUpdate(ns, ns.DeepCopy())
	assert.Empty(t, f.woken, "an update that keeps the labels wakes nobody")
	f.core.NamespaceEventHandler().OnUpdate(ns, relabelled)
	assert.Contains(t, f.woken, f.pod.Name, "woken when its labels change")
	d = f.core.Place(f.pod)
	assert.NotContains(t, d.Message, "refused", "the default policy allows any QOS")
}
