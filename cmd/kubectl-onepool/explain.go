package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/onepool/onepool/internal/poolview"
	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// explain is `kubectl onepool explain pod NAME`: 0 ok, 1 something could
// not be read (what could is shown), 2 bad usage or no such pod.
func explain(ctx context.Context, o options, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "pod" || args[0] == "pods" || args[0] == "po") {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(stderr, "kubectl onepool explain: one pod: kubectl onepool explain pod NAME [-n NAMESPACE]")
		return 2
	}
	if o.output != "table" && o.output != "json" && o.output != "yaml" {
		fmt.Fprintf(stderr, "kubectl onepool explain: -o %s: json or yaml (or none)\n", o.output)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	kc, rc, err := kubeClients(o)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl onepool: %v\n", err)
		return 1
	}
	ns := o.namespaces
	if ns == "" {
		ns = contextNamespace(o)
	}
	pod, err := kc.CoreV1().Pods(ns).Get(ctx, args[0], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(stderr, "kubectl onepool explain: pod %s/%s not found\n", ns, args[0])
		return 2
	} else if err != nil {
		fmt.Fprintf(stderr, "kubectl onepool: pod %s/%s: %v\n", ns, args[0], err)
		return 1
	}
	var errs []error
	events, err := kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	var evs []corev1.Event
	if err != nil {
		errs = append(errs, fmt.Errorf("the pod's events: %w", err))
	} else {
		evs = events.Items
	}
	policy, err := policyOf(ctx, kc, rc, ns)
	if err != nil {
		errs = append(errs, fmt.Errorf("its TenantPolicy: %w", err))
	}
	var in poolview.Input
	if err := readSlurm(ctx, o, &in); err != nil {
		errs = append(errs, fmt.Errorf("Slurm could not be read, its job is not shown: %w", err))
	}
	x := poolview.Explain(pod, in.Jobs, policy, evs)
	if len(errs) > 0 && x.Job == nil {
		x.JobNote = "not read"
	}
	for _, err := range errs {
		fmt.Fprintf(stderr, "kubectl onepool: %v\n", err)
	}
	if o.output == "table" {
		x.Print(stdout, time.Now())
	} else if err := printData(stdout, x, o.output); err != nil {
		fmt.Fprintf(stderr, "kubectl onepool: %v\n", err)
		return 1
	}
	if len(errs) > 0 {
		return 1
	}
	return 0
}

// contextNamespace is the kubeconfig context's namespace ("default").
func contextNamespace(o options) string {
	ns, _, err := clientConfig(o).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// policyOf says which TenantPolicy covers namespace, in words.
func policyOf(ctx context.Context, kc kubernetes.Interface, rc *rest.Config, namespace string) (string, error) {
	ns, err := kc.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	list, err := dc.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var ps []*v1alpha1.TenantPolicy
	for _, u := range list.Items {
		p := &v1alpha1.TenantPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), p); err != nil {
			return "", fmt.Errorf("TenantPolicy %s: %w", u.GetName(), err)
		}
		ps = append(ps, p)
	}
	p, err := tenancy.Match(ps, ns, "")
	switch {
	case errors.Is(err, tenancy.ErrNoPolicy):
		return "no TenantPolicy selects namespace " + namespace + ": the scheduler's default (--default-tenant-policy) applies, if it has one", nil
	case err != nil:
		return err.Error(), nil
	}
	return fmt.Sprintf("%s (Slurm user %s)", p.Name, p.Spec.SlurmUser), nil
}
