package scheduler

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// The placeholder script dials the release URL with bash's /dev/tcp: only
// plain http://host:port, with characters a script can carry.
func TestReleaseHostPort(t *testing.T) {
	for _, tc := range []struct {
		url, host, port string
		ok              bool
	}{
		{"http://onepool-scheduler.onepool-system:10270", "onepool-scheduler.onepool-system", "10270", true},
		{"http://10.0.0.7:10270/", "10.0.0.7", "10270", true},
		{"http://[fd00::1]:10270", "fd00::1", "10270", true},
		{"https://h:10270", "", "", false},
		{"http://h", "", "", false},
		{"http://h:10270/v1", "", "", false},
		{"http://h$(reboot):10270", "", "", false},
		{"::not a url", "", "", false},
	} {
		host, port, err := releaseHostPort(tc.url)
		assert.Equal(t, tc.ok, err == nil, "%s: %v", tc.url, err)
		assert.Equal(t, tc.host, host, tc.url)
		assert.Equal(t, tc.port, port, tc.url)
	}
}

// Each field the plugin validates is named in the error when wrong.
func TestValidateArgsNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		field  string
		change func(a *Args)
	}{
		{"slurmrestURL", func(a *Args) { a.SlurmrestURL = "slurmrestd:6820" }},
		{"slurmrestAPIVersion", func(a *Args) { a.SlurmrestAPIVersion = "v0.0.39" }},
		{"requestTimeout", func(a *Args) { a.RequestTimeout.Duration = 0 }},
		{"watchInterval", func(a *Args) { a.WatchInterval.Duration = -1 }},
		{"defaultAccount", func(a *Args) { a.DefaultAccount = "ml team" }},
		{"defaultExclusive", func(a *Args) { a.DefaultExclusive = "always" }},
		{"defaultTimeLimit", func(a *Args) { a.DefaultTimeLimit.Duration = -1 }},
		{"defaultTimeLimit", func(a *Args) { a.DefaultTimeLimit.Duration, a.MaxTimeLimit.Duration = 48*3600e9, 24*3600e9 }},
		{"releaseListenAddress", func(a *Args) { a.ReleaseListenAddress = "10270" }},
		{"submitWorkers", func(a *Args) { a.SubmitWorkers = 0 }},
		{"workDir", func(a *Args) { a.WorkDir = "/tmp/$(id)" }},
		{"placeholderKeySecret", func(a *Args) { a.PlaceholderKeySecret = "ns/" }},
	} {
		a := testArgs(t)
		require.NoError(t, validateArgs(a), "the base args are valid")
		tc.change(a)
		err := validateArgs(a)
		assert.ErrorContains(t, err, "args."+tc.field, "%s", tc.field)
	}
}

// Policies reach the scheduler as unstructured objects from a dynamic
// informer; a namespace decides which policy covers it only once the
// scheduler has seen it.
func TestInformerTenants(t *testing.T) {
	policy := &v1alpha1.TenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: v1alpha1.TenantPolicySpec{Namespaces: v1alpha1.NamespaceSelector{Names: []string{"ml"}}, SlurmUser: "team-a"}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
	require.NoError(t, err)
	policies := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, policies.Add(&unstructured.Unstructured{Object: u}))
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []string{"ml", "web"} {
		require.NoError(t, namespaces.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	tenants := InformerTenants{
		Policies:   cache.NewGenericLister(policies, v1alpha1.Resource.GroupResource()),
		Namespaces: corelisters.NewNamespaceLister(namespaces),
	}
	p, err := tenants.PolicyFor("ml")
	require.NoError(t, err)
	assert.Equal(t, "team-a", p.Spec.SlurmUser, "read from the unstructured object")
	_, err = tenants.PolicyFor("web")
	assert.ErrorIs(t, err, tenancy.ErrNoPolicy, "no policy covers it and there is no default")
	_, err = tenants.PolicyFor("new")
	assert.ErrorContains(t, err, "namespace new is not in the scheduler's cache yet")

	tenants.Default = "team-a"
	p, err = tenants.PolicyFor("web")
	require.NoError(t, err)
	assert.Equal(t, "team-a", p.Name, "the default policy")

	typed, err := toPolicy(policy)
	require.NoError(t, err)
	assert.Same(t, policy, typed)
	_, err = toPolicy(&corev1.Pod{})
	assert.ErrorContains(t, err, "unexpected *v1.Pod")
}

// A second profile of the plugin reuses the first one's series; a
// foreign collector of the same name is an error.
func TestNewMetricsTakesTheRegistryAsItIs(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := newMetrics(reg)
	require.NoError(t, err)
	_, err = newMetrics(reg)
	require.NoError(t, err, "a second profile")
	first.submissions.WithLabelValues("submitted").Inc()
	n, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range n {
		names[mf.GetName()] = true
	}
	assert.True(t, names["onepool_scheduler_submissions_total"])

	clash := prometheus.NewRegistry()
	require.NoError(t, clash.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "onepool_scheduler_slurm_pending_seconds", Help: "not ours"})))
	_, err = newMetrics(clash)
	assert.Error(t, err)

	unregistered, err := newMetrics(nil)
	require.NoError(t, err)
	assert.NotNil(t, unregistered.evictions, "series exist even when not exported")
}
