// Package scheme registers onepool's scheduler plugin args with
// kube-scheduler, so the scheduler framework decodes, defaults and
// converts them like an in-tree plugin's.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	kubeschedv1 "k8s.io/kube-scheduler/config/v1"
	kubeconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubescheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/onepool/onepool/scheduler/apis/config"
	configv1 "github.com/onepool/onepool/scheduler/apis/config/v1"
)

// AddToScheme registers OnepoolArgs, internal and v1, in s.
func AddToScheme(s *runtime.Scheme) error {
	if err := config.AddToScheme(s); err != nil {
		return err
	}
	return configv1.AddToScheme(s)
}

// Install registers OnepoolArgs with kube-scheduler: in the scheme its
// config file is decoded with, and in the scheme builders it makes its
// plugin-args conversion scheme from (on first use). Call it once, before
// the scheduler command reads its config.
func Install() error {
	kubeschedv1.SchemeBuilder.Register(configv1.AddToScheme)
	kubeconfig.SchemeBuilder.Register(config.AddToScheme)
	return AddToScheme(kubescheme.Scheme)
}
