package e2e

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/onepool/onepool/test/lab"
)

// asTenant returns a client that acts as a namespace's own user, as a
// platform team would set one up: the API server authorizes its every
// request as user (impersonated), who holds Kubernetes' built-in "edit"
// role in namespace ns (made if missing) and nothing elsewhere. Attacks
// are run with it, never with the lab's admin credentials; it checks
// that the user is no more than that.
func asTenant(t *testing.T, l *lab.Lab, ns, user string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	admin, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-edit", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	can := func(ns, verb, group, resource, sub string) bool {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("access review as %s: %v", user, err)
		}
		return r.Status.Allowed
	}
	eventually(t, 10*time.Second, user+" may create pods in "+ns, func() (bool, string) { return can(ns, "create", "", "pods", ""), "denied" })
	if can(ns, "update", "", "pods", "status") || can(syncerNS, "create", "", "pods", "") || can(lab.SystemNamespace, "create", "", "pods", "") ||
		can("", "create", "onepool.dev", "tenantpolicies", "") || can("", "update", "onepool.dev", "tenantpolicies", "") {
		t.Fatalf("%s has more than edit in %s: the test would not be a tenant's", user, ns)
	}
	return kc
}
