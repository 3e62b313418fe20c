// Package v1alpha1 is the onepool.dev/v1alpha1 API: the NodeSet.
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

// NodeSetKind is the NodeSet's kind, as owner references name it.
const NodeSetKind = "NodeSet"

// AddToScheme registers the API's types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NodeSet{}, &NodeSetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
