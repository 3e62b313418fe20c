package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab"
)

// Rights every authenticated user has (system:basic-user): not the
// component's.
var everyonesRights = []string{
	"create authentication.k8s.io/selfsubjectreviews",
	"create authorization.k8s.io/selfsubjectaccessreviews",
	"create authorization.k8s.io/selfsubjectrulesreviews",
}

// The rights each component uses, as "verb group/resource[/sub][:name]",
// in an ordinary namespace (cluster-wide rights) and, added, in the
// release's namespace. A right the chart grants beyond these fails the
// test: it is one no code of the component uses.
var componentRights = map[string]struct{ anywhere, own []string }{
	lab.ControllerManagerSA: {
		anywhere: []string{
			// syncer: drain records and Slurm's view on Nodes; SlurmUnavailable condition.
			"get nodes", "list nodes", "watch nodes", "patch nodes", "patch nodes/status",
			// NodeSet controller: slurmd pods (the pod policy keeps create,
			// delete and patch to NodeSet namespaces); syncer: finalizer, annotations.
			"get pods", "list pods", "watch pods", "create pods", "delete pods", "patch pods",
			"create events", "patch events", "create events.k8s.io/events", "patch events.k8s.io/events",
			// NodeSet controller: its finalizer (update), status (update).
			"get onepool.dev/nodesets", "list onepool.dev/nodesets", "watch onepool.dev/nodesets", "update onepool.dev/nodesets",
			"update onepool.dev/nodesets/status", "update onepool.dev/nodesets/finalizers",
			// Tenancy webhook and the TenantPolicy status controller.
			"get onepool.dev/tenantpolicies", "list onepool.dev/tenantpolicies", "watch onepool.dev/tenantpolicies",
			"update onepool.dev/tenantpolicies/status",
			"get namespaces", "list namespaces", "watch namespaces",
			// NodeSet controller: a PodDisruptionBudget per NodeSet.
			"get policy/poddisruptionbudgets", "list policy/poddisruptionbudgets", "watch policy/poddisruptionbudgets",
			"create policy/poddisruptionbudgets", "delete policy/poddisruptionbudgets",
			// Who may read its /metrics (HTTPS, authenticated and authorized).
			"create authentication.k8s.io/tokenreviews", "create authorization.k8s.io/subjectaccessreviews",
			// webhookcert: the caBundle of its two webhook configurations.
			"get admissionregistration.k8s.io/mutatingwebhookconfigurations:onepool-gpu-webhook",
			"update admissionregistration.k8s.io/mutatingwebhookconfigurations:onepool-gpu-webhook",
			"get admissionregistration.k8s.io/validatingwebhookconfigurations:onepool-gpu-webhook-tenancy",
			"update admissionregistration.k8s.io/validatingwebhookconfigurations:onepool-gpu-webhook-tenancy",
		},
		own: []string{
			// Leader election.
			"create coordination.k8s.io/leases",
			"get coordination.k8s.io/leases:onepool-controller-manager", "update coordination.k8s.io/leases:onepool-controller-manager",
			"patch coordination.k8s.io/leases:onepool-controller-manager",
			// webhookcert: its certificate's Secret.
			"create secrets", "get secrets:onepool-gpu-webhook-cert", "update secrets:onepool-gpu-webhook-cert",
		},
	},
	lab.SchedulerSA: {
		anywhere: []string{
			// kube-scheduler's own (system:kube-scheduler, system:volume-scheduler).
			"create events", "patch events", "update events", "create events.k8s.io/events", "patch events.k8s.io/events", "update events.k8s.io/events",
			"get nodes", "list nodes", "watch nodes", "get namespaces", "list namespaces", "watch namespaces",
			"get services", "list services", "watch services", "get replicationcontrollers", "list replicationcontrollers", "watch replicationcontrollers",
			"get pods", "list pods", "watch pods", "create pods/binding", "create bindings", "patch pods/status", "update pods/status",
			"get persistentvolumeclaims", "list persistentvolumeclaims", "watch persistentvolumeclaims", "patch persistentvolumeclaims", "update persistentvolumeclaims",
			"get persistentvolumes", "list persistentvolumes", "watch persistentvolumes", "patch persistentvolumes", "update persistentvolumes",
			"get apps/replicasets", "list apps/replicasets", "watch apps/replicasets", "get apps/statefulsets", "list apps/statefulsets", "watch apps/statefulsets",
			"get policy/poddisruptionbudgets", "list policy/poddisruptionbudgets", "watch policy/poddisruptionbudgets",
			"get storage.k8s.io/storageclasses", "list storage.k8s.io/storageclasses", "watch storage.k8s.io/storageclasses",
			"get storage.k8s.io/csinodes", "list storage.k8s.io/csinodes", "watch storage.k8s.io/csinodes",
			"get storage.k8s.io/csidrivers", "list storage.k8s.io/csidrivers", "watch storage.k8s.io/csidrivers",
			"get storage.k8s.io/csistoragecapacities", "list storage.k8s.io/csistoragecapacities", "watch storage.k8s.io/csistoragecapacities",
			"get storage.k8s.io/volumeattachments", "list storage.k8s.io/volumeattachments", "watch storage.k8s.io/volumeattachments",
			"get resource.k8s.io/deviceclasses", "list resource.k8s.io/deviceclasses", "watch resource.k8s.io/deviceclasses",
			"get resource.k8s.io/resourceslices", "list resource.k8s.io/resourceslices", "watch resource.k8s.io/resourceslices",
			"get resource.k8s.io/resourceclaims", "list resource.k8s.io/resourceclaims", "watch resource.k8s.io/resourceclaims",
			"patch resource.k8s.io/resourceclaims", "update resource.k8s.io/resourceclaims",
			"get resource.k8s.io/resourceclaims/status", "list resource.k8s.io/resourceclaims/status", "watch resource.k8s.io/resourceclaims/status",
			"patch resource.k8s.io/resourceclaims/status", "update resource.k8s.io/resourceclaims/status",
			// Kubernetes 1.36 asks it of a claim's allocation and reservedFor.
			"patch resource.k8s.io/resourceclaims/binding", "update resource.k8s.io/resourceclaims/binding",
			// Delegated authentication and authorization of its secure port.
			"create authentication.k8s.io/tokenreviews", "create authorization.k8s.io/subjectaccessreviews",
			"get scheduling.x-k8s.io/podgroups", "list scheduling.x-k8s.io/podgroups", "watch scheduling.x-k8s.io/podgroups",
			"get leaderworkerset.x-k8s.io/leaderworkersets", "get jobset.x-k8s.io/jobsets",
			// onepool: the Slurm job on the pod (patch), eviction of a pod
			// whose job ended (delete past a PDB that keeps refusing), the
			// GPU claim the webhook named, each namespace's TenantPolicy.
			"patch pods", "delete pods", "create pods/eviction", "create resource.k8s.io/resourceclaims",
			"get onepool.dev/tenantpolicies", "list onepool.dev/tenantpolicies", "watch onepool.dev/tenantpolicies",
		},
		own: []string{
			"create coordination.k8s.io/leases",
			"get coordination.k8s.io/leases:onepool-scheduler", "update coordination.k8s.io/leases:onepool-scheduler",
			"patch coordination.k8s.io/leases:onepool-scheduler",
			// The placeholder signing key: made by the first replica, then read.
			"create secrets", "get secrets:onepool-scheduler-placeholder-key",
		},
	},
}

// rightsOf lists what a credential may do in namespace ns, as the API
// server says (SelfSubjectRulesReview), one "verb group/resource[:name]" each.
func rightsOf(t *testing.T, kc kubernetes.Interface, ns string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := kc.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authzv1.SelfSubjectRulesReview{
		Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.False(t, r.Status.Incomplete, "the review is incomplete: %s", r.Status.EvaluationError)
	var out []string
	for _, rule := range r.Status.ResourceRules {
		names := rule.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, v := range rule.Verbs {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, n := range names {
						s := v + " " + res
						if g != "" {
							s = v + " " + g + "/" + res
						}
						if n != "" {
							s += ":" + n
						}
						out = append(out, s)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Each component's credential, as the API server reads it, has exactly
// the rights its code uses: none more (least privilege), none less (it
// would fail in a cluster). Then the manager's pod rights, attacked with
// its own credential: pods are made, deleted and changed only in the
// namespaces that hold NodeSets, and made only for a NodeSet.
func TestTrustComponentRights(t *testing.T) {
	l := lab.Shared(t)
	tenant := uniqueName("rights-tenant")
	admin, err := l.KubeClient()
	require.NoError(t, err)
	ctx := context.Background()
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), tenant, metav1.DeleteOptions{}) })

	for sa, want := range componentRights {
		t.Run(sa, func(t *testing.T) {
			kc, err := l.SAClient(sa)
			require.NoError(t, err)
			for _, tc := range []struct {
				ns   string
				want []string
			}{
				{tenant, append(slices.Clone(want.anywhere), everyonesRights...)},
				{lab.SystemNamespace, append(append(slices.Clone(want.anywhere), want.own...), everyonesRights...)},
			} {
				have := rightsOf(t, kc, tc.ns)
				sort.Strings(tc.want)
				w := slices.Compact(tc.want)
				var extra, missing []string
				for _, r := range have {
					if !slices.Contains(w, r) {
						extra = append(extra, r)
					}
				}
				for _, r := range w {
					if !slices.Contains(have, r) {
						missing = append(missing, r)
					}
				}
				assert.Empty(t, extra, "in namespace %s %s may do what it never does", tc.ns, sa)
				assert.Empty(t, missing, "in namespace %s %s lacks what it does", tc.ns, sa)
			}
		})
	}

	t.Run("the manager's pods only where NodeSets are", func(t *testing.T) {
		c, err := l.Client()
		require.NoError(t, err)
		served := uniqueName("rights-nodesets")
		require.NoError(t, lab.ServeNodeSets(ctx, c, served))
		t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), served, metav1.DeleteOptions{}) })
		owner, err := lab.EnsureHandNodeSet(ctx, c, served)
		require.NoError(t, err)
		mgr, err := l.SAClient(lab.ControllerManagerSA)
		require.NoError(t, err)

		pod := func(ns, name string, owners ...metav1.OwnerReference) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners},
				Spec: corev1.PodSpec{SchedulerName: "no-such-scheduler", Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
		}
		// A tenant's pod, made by the admin.
		victim, err := admin.CoreV1().Pods(tenant).Create(ctx, pod(tenant, "app"), metav1.CreateOptions{})
		require.NoError(t, err)

		denied := func(what string, err error, want string) {
			t.Helper()
			t.Logf("%s: %v", what, err)
			if assert.Error(t, err, what) {
				assert.Contains(t, err.Error(), want, what)
			}
		}
		_, err = mgr.CoreV1().Pods(tenant).Create(ctx, pod(tenant, "stolen"), metav1.CreateOptions{})
		denied("a pod in a tenant's namespace", err, "only in namespaces labelled")
		otherNS := owner
		_, err = mgr.CoreV1().Pods(tenant).Create(ctx, pod(tenant, "stolen-owned", otherNS), metav1.CreateOptions{})
		denied("a NodeSet-owned pod in a tenant's namespace", err, "only in namespaces labelled")
		_, err = mgr.CoreV1().Pods(served).Create(ctx, pod(served, "unowned"), metav1.CreateOptions{})
		denied("a pod no NodeSet controls, where NodeSets are", err, "only pods a NodeSet controls")
		made, err := mgr.CoreV1().Pods(served).Create(ctx, pod(served, "slurmd-like", owner), metav1.CreateOptions{})
		require.NoError(t, err, "a NodeSet's pod where NodeSets are")
		require.NoError(t, mgr.CoreV1().Pods(served).Delete(ctx, made.Name, metav1.DeleteOptions{}), "and its deletion")

		image := fmt.Appendf(nil, `{"spec":{"containers":[{"name":"c","image":"registry.example/attacker:1"}]}}`)
		_, err = mgr.CoreV1().Pods(tenant).Patch(ctx, victim.Name, types.StrategicMergePatchType, image, metav1.PatchOptions{})
		denied("a tenant pod's image swapped", err, "only in namespaces labelled")
		_, err = mgr.CoreV1().Pods(tenant).Patch(ctx, victim.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`), metav1.PatchOptions{})
		denied("a tenant pod's labels changed", err, "only in namespaces labelled")
		denied("a tenant's pod deleted", mgr.CoreV1().Pods(tenant).Delete(ctx, victim.Name, metav1.DeleteOptions{}), "only in namespaces labelled")
		// What the syncer does to a pod no NodeSet owns: its finalizer off
		// (metadata only) still works.
		_, err = mgr.CoreV1().Pods(tenant).Patch(ctx, victim.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"example":"x"}}}`), metav1.PatchOptions{})
		assert.NoError(t, err, "a metadata-only change outside NodeSet namespaces")
		got, err := admin.CoreV1().Pods(tenant).Get(ctx, victim.Name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "registry.example/app:1", got.Spec.Containers[0].Image)
	})
}
