package lab

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	tenancyv1alpha1 "github.com/onepool/onepool/tenancy/api/v1alpha1"
	"github.com/onepool/onepool/test/lab/kwoknodes"
)

// LabNodeLabel marks the Nodes the lab made.
const LabNodeLabel = kwoknodes.Label

// RESTConfig is the admin config for the lab's kube-apiserver.
func (l *Lab) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// KubeClient is an admin clientset for the lab.
func (l *Lab) KubeClient() (kubernetes.Interface, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Client is an admin controller-runtime client for the lab that knows
// onepool's own API (NodeSet, TenantPolicy) as well as Kubernetes'.
func (l *Lab) Client() (client.Client, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := tenancyv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// KwokNode is the Node object of a lab GPU node (package kwoknodes).
func KwokNode(name string) *corev1.Node { return kwoknodes.Node(name) }

// RestoreKubeNodes makes again the lab's Nodes a test deleted.
func (l *Lab) RestoreKubeNodes(ctx context.Context) error { return l.ensureKubeNodes(ctx) }

// ensureKubeNodes makes a kwok Node for every Slurm node of the lab (and
// every dynamic node) and removes nodes a bigger lab left behind.
func (l *Lab) ensureKubeNodes(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	return kwoknodes.Ensure(ctx, kc, slices.Concat(l.NodeNames(), l.ExtraNodeNames(), l.DynNodeNames()), func(name string) *corev1.Node {
		if _, ok := DynSlurmdPort(name); ok {
			return kwoknodes.DynNode(name)
		}
		return kwoknodes.Node(name)
	})
}
