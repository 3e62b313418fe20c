package lab

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	tenancyv1alpha1 "github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// LabNodeLabel marks the Nodes the lab made.
const LabNodeLabel = "lab.onepool.dev/node"

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

// KwokNode is the Node object of a lab GPU node: kwok keeps it Ready, and it
// offers the same GPUs Slurm knows.
func KwokNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(NodeCPUs, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(NodeMemoryMB*1024*1024, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		"nvidia.com/gpu":      *resource.NewQuantity(GPUsPerNode, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				LabNodeLabel: "true",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// DynKwokNode is the Node of a dynamic lab node: a kwok Node whose slurmd
// pods the lab kubelet runs in the Slurm chroot.
func DynKwokNode(name string) *corev1.Node {
	n := KwokNode(name)
	n.Annotations[KubeletAnnotation] = KubeletChroot
	return n
}

// RestoreKubeNodes makes again the lab's Nodes a test deleted.
func (l *Lab) RestoreKubeNodes(ctx context.Context) error { return l.ensureKubeNodes(ctx) }

// ensureKubeNodes makes a kwok Node for every Slurm node of the lab (and
// every dynamic node) and removes nodes a bigger lab left behind.
func (l *Lab) ensureKubeNodes(ctx context.Context) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	existing, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabNodeLabel})
	if err != nil {
		return err
	}
	all := slices.Concat(l.NodeNames(), l.ExtraNodeNames(), l.DynNodeNames())
	want := map[string]bool{}
	for _, n := range all {
		want[n] = true
	}
	var create, remove []string
	have := map[string]bool{}
	for _, n := range existing.Items {
		have[n.Name] = true
		if !want[n.Name] { // a smaller lab than last time
			remove = append(remove, n.Name)
		}
	}
	for _, n := range all {
		if !have[n] {
			create = append(create, n)
		}
	}
	return parallel(ctx, 8, create, remove, func(ctx context.Context, name string, del bool) error {
		if del {
			err := kc.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		// A Node may be created with its status; kwok then adds conditions.
		node := KwokNode(name)
		if _, ok := DynSlurmdPort(name); ok {
			node = DynKwokNode(name)
		}
		_, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		return nil
	})
}

func parallel(ctx context.Context, workers int, create, remove []string, fn func(context.Context, string, bool) error) error {
	type item struct {
		name string
		del  bool
	}
	items := make(chan item)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range items {
				if err := fn(ctx, it.name, it.del); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range create {
		items <- item{n, false}
	}
	for _, n := range remove {
		items <- item{n, true}
	}
	close(items)
	wg.Wait()
	return first
}
