// Package v1alpha1 is the TenantPolicy of the onepool.dev/v1alpha1 API:
// what the namespaces of one team may ask of Slurm.
//
// +kubebuilder:object:generate=true
// +groupName=onepool.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is onepool.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "onepool.dev", Version: "v1alpha1"}

// Resource is the TenantPolicy's resource, for dynamic clients and informers.
var Resource = GroupVersion.WithResource("tenantpolicies")

// AddToScheme registers the API's types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TenantPolicy{}, &TenantPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
