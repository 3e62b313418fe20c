// Package config is the onepool scheduler plugin's configuration, internal
// version: OnepoolArgs, as the plugin reads it once the scheduler framework
// has decoded, defaulted and converted pluginConfig[].args.
//
// +k8s:deepcopy-gen=package
package config
