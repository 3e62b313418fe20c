package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/onepool/onepool/scheduler/apis/config"
)

// SchemeGroupVersion is the version written in configs.
var SchemeGroupVersion = schema.GroupVersion{Group: config.GroupName, Version: "v1"}

// localSchemeBuilder registers the types, their defaults and (from the
// generated file) their conversions.
var localSchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, RegisterDefaults)

// AddToScheme registers v1 with its defaults and conversions.
func AddToScheme(s *runtime.Scheme) error { return localSchemeBuilder.AddToScheme(s) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &OnepoolArgs{})
	return nil
}
