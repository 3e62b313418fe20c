package scheduler

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// Tenants says which TenantPolicy covers a namespace.
type Tenants interface {
	PolicyFor(namespace string) (*v1alpha1.TenantPolicy, error)
}

// errPolicy marks a refusal by tenancy: no policy, two policies, or a
// setting the policy does not allow.
var errPolicy = errors.New("tenancy")

// errNotCached: a pod's namespace has not reached the scheduler's
// informer yet; the pod is placed again soon (retrier.pod).
var errNotCached = errors.New("not in the scheduler's cache yet")

// policyError wraps a tenancy decision so callers can tell it apart.
type policyError struct{ err error }

func (e policyError) Error() string        { return e.err.Error() }
func (e policyError) Unwrap() error        { return e.err }
func (e policyError) Is(target error) bool { return target == errPolicy }
func refusedByPolicy(err error) error      { return policyError{err} }

// InformerTenants reads policies and namespaces from informers' caches.
type InformerTenants struct {
	Policies   cache.GenericLister // TenantPolicies (unstructured, cluster-scoped)
	Namespaces corelisters.NamespaceLister
	// Default is the policy of namespaces no policy covers ("" none: they
	// are refused).
	Default string
}

func (t InformerTenants) PolicyFor(namespace string) (*v1alpha1.TenantPolicy, error) {
	ns, err := t.Namespaces.Get(namespace)
	if apierrors.IsNotFound(err) {
		// A namespace made a moment before its pod: deciding on its name
		// alone could pick another policy than its labels select. The pod
		// is placed again when the namespace reaches the cache
		// (NamespaceEventHandler), and soon after in any case (retrier.pod).
		return nil, fmt.Errorf("namespace %s is %w", namespace, errNotCached)
	} else if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	objs, err := t.Policies.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing TenantPolicies: %w", err)
	}
	ps := make([]*v1alpha1.TenantPolicy, 0, len(objs))
	for _, o := range objs {
		p, err := toPolicy(o)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return tenancy.Match(ps, ns, t.Default)
}

// toPolicy converts an informer's object (unstructured from a dynamic
// informer) to a TenantPolicy.
func toPolicy(o runtime.Object) (*v1alpha1.TenantPolicy, error) {
	if p, ok := o.(*v1alpha1.TenantPolicy); ok {
		return p, nil
	}
	u, ok := o.(runtime.Unstructured)
	if !ok {
		return nil, fmt.Errorf("TenantPolicy: unexpected %T", o)
	}
	p := &v1alpha1.TenantPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), p); err != nil {
		return nil, fmt.Errorf("TenantPolicy: %w", err)
	}
	return p, nil
}

// policies applies the TenantPolicies: what a pod may ask of Slurm, and
// whether its job must wait for its policy's cap on GPUs (counted from
// the store's placements).
type policies struct {
	args    *Args
	tenants Tenants // nil: no policy applies
	st      capRecords
}

// request is what a pod asks of Slurm, as its TenantPolicy allows it. A
// refusal by the policy is a policyError.
func (c *policies) request(pod *corev1.Pod) (request, error) {
	r, err := requestFor(pod, c.args)
	if err != nil || c.tenants == nil {
		return r, err
	}
	p, err := c.tenants.PolicyFor(pod.Namespace)
	if errors.Is(err, errNotCached) {
		return request{}, err
	} else if err != nil {
		return request{}, refusedByPolicy(err)
	}
	g, err := tenancy.Decide(p, tenancy.AskOf(pod, r.GPUs))
	if err != nil {
		return request{}, refusedByPolicy(err)
	}
	return grantTo(r, g), nil
}

// overCap says why owner o's job, nodes nodes of req, must wait for its
// TenantPolicy's cap on GPUs held at once ("" it need not): the GPUs of
// the live placeholder jobs of every pod the same policy covers, and of
// those being submitted, plus this one's, may not pass spec.maxGPUs. When
// it need not wait, its GPUs are counted as being submitted until the
// submission ends (release).
func (c *policies) overCap(o owner, req request, nodes int) string {
	if c.tenants == nil || req.Policy == "" || req.GPUs == 0 {
		return ""
	}
	p, err := c.tenants.PolicyFor(o.Namespace)
	if err != nil || p.Name != req.Policy || p.Spec.MaxGPUs <= 0 {
		return ""
	}
	want := req.GPUs * int64(nodes)
	// The GPUs of the pods policy covers: those their live placeholder
	// jobs hold or wait for.
	gpus := func(pod *corev1.Pod) int64 {
		r, err := c.request(pod)
		if err != nil || r.Policy != req.Policy {
			return 0
		}
		return r.GPUs
	}
	if held, ok := c.st.reserve(o.key(), want, int64(p.Spec.MaxGPUs), gpus); !ok {
		return fmt.Sprintf("waiting for GPUs under TenantPolicy %q: its pods hold %d of its %d, this one asks %d", p.Name, held, p.Spec.MaxGPUs, want)
	}
	return ""
}

// PolicyEventHandler wakes pods: a TenantPolicy made, changed or deleted may let a
// waiting pod go, or refuse it; every onepool pod not yet bound is
// placed again.
func (c *manager) PolicyEventHandler() cache.ResourceEventHandler {
	wake := func(any) { c.wakePending("") }
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, o any) { wake(o) },
		DeleteFunc: wake,
	}
}

// NamespaceEventHandler wakes pods: a namespace that reaches the cache, or whose
// labels change, may be covered by another policy; its onepool pods not
// yet bound are placed again.
func (c *manager) NamespaceEventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if ns, ok := o.(*corev1.Namespace); ok {
				c.wakePending(ns.Name)
			}
		},
		UpdateFunc: func(old, o any) {
			a, ok1 := old.(*corev1.Namespace)
			b, ok2 := o.(*corev1.Namespace)
			if ok1 && ok2 && !labels.Equals(a.Labels, b.Labels) {
				c.wakePending(b.Name)
			}
		},
	}
}

// wakePending forgets the refusals of the onepool pods not yet bound, in
// namespace ("" every namespace), and places them again.
func (c *manager) wakePending(namespace string) {
	pending := c.rec.forgetRefusals(namespace)
	c.activate(pending)
}
