package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// onepool's GPUs could be taken without Slurm: a claim on the DeviceClass
// gpu.onepool.dev, made by a pod author (or from a claim template) for a
// pod of another scheduler, was allocated by kube-scheduler's
// DynamicResources plugin and prepared by onepool's node agent. Now such a
// claim or template is refused at admission, for a tenant who may
// otherwise make claims; onepool's own path (the scheduler makes the
// claim from the GPUs Slurm gave the job) still works (TestDRA*, TestGPU*).
func TestTrustTenantCannotClaimOnepoolsGPUs(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	tc := asTenant(t, e.l, e.ns, "tenant-dra")
	// Many clusters let namespace users make claims; so does this one.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "claims", Namespace: e.ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"create", "update"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "claims", Namespace: e.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "claims"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tenant-dra"}}}
	if _, err := e.kc.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kc.RbacV1().RoleBindings(e.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	claim := gpuClaimObj(e.ns, "mine", 2)
	var err error
	eventually(t, 10*time.Second, "the tenant's claim is judged by the policy, not by RBAC", func() (bool, string) {
		_, err = tc.ResourceV1().ResourceClaims(e.ns).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && !strings.Contains(err.Error(), "cannot create resource"), errString(err)
	})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "made by onepool only") {
		t.Errorf("a tenant's claim on onepool's GPUs: %v; want refused", err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: e.ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim.Spec}}
	_, err = tc.ResourceV1().ResourceClaimTemplates(e.ns).Create(ctx, tmpl, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "made by onepool only") {
		t.Errorf("a tenant's claim template on onepool's GPUs: %v; want refused", err)
	}
	// A claim on another class is none of onepool's business.
	other := gpuClaimObj(e.ns, "other", 1)
	other.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu.example.com"
	if _, err := tc.ResourceV1().ResourceClaims(e.ns).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a claim on another class: %v", err)
	}
}
