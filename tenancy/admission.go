package tenancy

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// Path is where the controller manager serves the tenancy webhook.
const Path = "/validate-onepool-tenancy"

// Admission refuses, when a onepool pod is created or its annotations
// change, what its namespace's TenantPolicy does not allow, with the
// policy, the setting and what it allows in the message. The scheduler
// checks again before it submits (a policy may change after admission).
type Admission struct {
	Reader client.Reader // TenantPolicies and Namespaces (the manager's cache)
	// Live reads a Namespace the cache has not seen yet: a namespace
	// created a moment before its first pod is often not in the cache.
	Live    client.Reader
	Default string // the policy of namespaces none covers
	decoder admission.Decoder
}

// NewAdmission decodes pods with scheme; live (the API server itself)
// answers for namespaces the cache r does not know yet.
func NewAdmission(scheme *runtime.Scheme, r, live client.Reader, defaultPolicy string) *Admission {
	return &Admission{Reader: r, Live: live, Default: defaultPolicy, decoder: admission.NewDecoder(scheme)}
}

// Handle implements admission.Handler.
func (a *Admission) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := a.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Spec.SchedulerName != keys.SchedulerName {
		return admission.Allowed("")
	}
	if req.Operation == admissionv1.Update {
		// Only a changed ask is judged again: a pod admitted before its
		// policy narrowed must still let its gates, labels and finalizers
		// change (the scheduler refuses it before it submits anything).
		old := &corev1.Pod{}
		if err := a.decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if AskOf(old, PodGPUs(old)) == AskOf(pod, PodGPUs(pod)) {
			return admission.Allowed("")
		}
	}
	err := a.check(ctx, pod, req.Namespace)
	var refusal *Refusal
	switch {
	case err == nil:
		return admission.Allowed("")
	case errors.As(err, &refusal), errors.Is(err, ErrNoPolicy), errors.Is(err, ErrConflict):
		return admission.Denied(err.Error())
	}
	// Not a decision (the webhook could not read what it needs): the pod
	// is admitted with a warning, as the chart's failurePolicy Ignore
	// would admit it; an answer with allowed=false would be a denial
	// whatever the failurePolicy says. Nothing is given away: the
	// scheduler checks the policy again before any job is submitted.
	return admission.Allowed("").WithWarnings(fmt.Sprintf("onepool could not check the TenantPolicy now (%v); the scheduler checks it before the pod's Slurm job is submitted", err))
}

func (a *Admission) check(ctx context.Context, pod *corev1.Pod, namespace string) error {
	ns := &corev1.Namespace{}
	err := a.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	if apierrors.IsNotFound(err) && a.Live != nil {
		err = a.Live.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	list := &v1alpha1.TenantPolicyList{}
	if err := a.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing TenantPolicies: %w", err)
	}
	ps := make([]*v1alpha1.TenantPolicy, len(list.Items))
	for i := range list.Items {
		ps[i] = &list.Items[i]
	}
	p, err := Match(ps, ns, a.Default)
	if err != nil {
		return err
	}
	_, err = Decide(p, AskOf(pod, PodGPUs(pod)))
	return err
}
