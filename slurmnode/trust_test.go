package slurmnode

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

func trustNodeSet() *v1alpha1.NodeSet {
	return &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "h100", Namespace: "slurm", UID: "uid-h100"}}
}

// trustPod is a pod in namespace slurm with the slurmd label, bound to
// gpu-0, with the owner references refs.
func trustPod(refs ...metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slurmd-h100-gpu-0", Namespace: "slurm", OwnerReferences: refs,
			Labels:      map[string]string{keys.LabelComponent: keys.ComponentSlurmd},
			Annotations: map[string]string{keys.AnnotationSlurmNode: "gpu-0"}},
		Spec: corev1.PodSpec{NodeName: "gpu-0"},
	}
}

// ref is the owner reference the NodeSet controller writes, changed by edit.
func ref(edit func(*metav1.OwnerReference)) metav1.OwnerReference {
	r := *metav1.NewControllerRef(trustNodeSet(), v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind))
	if edit != nil {
		edit(&r)
	}
	return r
}

func TestIsSlurmd(t *testing.T) {
	no := false
	cases := []struct {
		name string
		pod  *corev1.Pod
		ns   *v1alpha1.NodeSet // what the lookup by the reference's name found
		want bool
	}{
		{"owned by its NodeSet", trustPod(ref(nil)), trustNodeSet(), true},
		{"owned, among other owners", trustPod(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}, ref(nil)), trustNodeSet(), true},
		{"an older version of the API, same NodeSet", trustPod(ref(func(r *metav1.OwnerReference) { r.APIVersion = "onepool.dev/v1alpha0" })), trustNodeSet(), true},
		{"label only: no owner", trustPod(), trustNodeSet(), false},
		{"a NodeSet owner that is not the controller", trustPod(ref(func(r *metav1.OwnerReference) { r.Controller = &no })), trustNodeSet(), false},
		{"a NodeSet owner with no controller field", trustPod(ref(func(r *metav1.OwnerReference) { r.Controller = nil })), trustNodeSet(), false},
		{"controller of another kind", trustPod(ref(func(r *metav1.OwnerReference) { r.Kind = "DaemonSet" })), trustNodeSet(), false},
		{"controller of another group", trustPod(ref(func(r *metav1.OwnerReference) { r.APIVersion = "slinky.slurm.net/v1alpha1" })), trustNodeSet(), false},
		{"core group, kind NodeSet", trustPod(ref(func(r *metav1.OwnerReference) { r.APIVersion = "v1" })), trustNodeSet(), false},
		{"an API version that does not parse", trustPod(ref(func(r *metav1.OwnerReference) { r.APIVersion = "a/b/c" })), trustNodeSet(), false},
		{"UID of another NodeSet", trustPod(ref(func(r *metav1.OwnerReference) { r.UID = "uid-other" })), trustNodeSet(), false},
		{"no UID", trustPod(ref(func(r *metav1.OwnerReference) { r.UID = "" })), &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "h100", Namespace: "slurm"}}, false},
		{"NodeSet missing", trustPod(ref(nil)), nil, false},
		{"NodeSet of another name", trustPod(ref(func(r *metav1.OwnerReference) { r.Name = "a100" })), trustNodeSet(), false},
		{"NodeSet in another namespace", trustPod(ref(nil)), &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "h100", Namespace: "team-a", UID: "uid-h100"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, IsSlurmd(tc.pod, tc.ns))
		})
	}
}

// IsSlurmdPod finds the NodeSet by the reference's name in the pod's own
// namespace: a NodeSet of that name and UID elsewhere does not count.
func TestIsSlurmdPodReadsTheNamedNodeSet(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	ns := trustNodeSet()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns).Build()
	ctx := context.Background()

	ok, err := IsSlurmdPod(ctx, c, trustPod(ref(nil)))
	require.NoError(t, err)
	assert.True(t, ok, "owned by an existing NodeSet")

	elsewhere := trustPod(ref(nil))
	elsewhere.Namespace = "team-a"
	ok, err = IsSlurmdPod(ctx, c, elsewhere)
	require.NoError(t, err)
	assert.False(t, ok, "same name and UID, but the pod's namespace has no such NodeSet")

	ok, err = IsSlurmdPod(ctx, c, trustPod())
	require.NoError(t, err)
	assert.False(t, ok, "label only")

	require.NoError(t, c.Delete(ctx, ns))
	ok, err = IsSlurmdPod(ctx, c, trustPod(ref(nil)))
	require.NoError(t, err)
	assert.False(t, ok, "its NodeSet is gone")
}

// Without the NodeSet API no pod is a slurmd pod; a read that fails
// otherwise decides nothing.
func TestIsSlurmdPodReadErrors(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	failing := func(err error) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return err
			},
		}).Build()
	}
	ctx := context.Background()
	ok, err := IsSlurmdPod(ctx, failing(&meta.NoKindMatchError{GroupKind: v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind).GroupKind()}), trustPod(ref(nil)))
	require.NoError(t, err)
	assert.False(t, ok, "no NodeSet API")

	boom := errors.New("cache not synced")
	ok, err = IsSlurmdPod(ctx, failing(boom), trustPod(ref(nil)))
	require.ErrorIs(t, err, boom)
	assert.False(t, ok)
}
