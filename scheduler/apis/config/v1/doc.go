// Package v1 is the onepool scheduler plugin's configuration as written in
// a KubeSchedulerConfiguration's pluginConfig[].args: apiVersion
// kubescheduler.config.k8s.io/v1, kind OnepoolArgs (the kind the framework
// expects of a plugin named Onepool). The framework decodes it strictly,
// defaults it and converts it to the internal version.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/onepool/onepool/scheduler/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io
package v1
