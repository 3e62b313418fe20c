package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is kube-scheduler's config group: the framework converts typed
// plugin args into its internal version, so every out-of-tree plugin's
// args kinds (scheduler-plugins' too) are registered in it. The kind,
// OnepoolArgs, is onepool's own.
const GroupName = "kubescheduler.config.k8s.io"

// SchemeGroupVersion is the internal version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// AddToScheme registers the internal types.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &OnepoolArgs{})
	return nil
}
