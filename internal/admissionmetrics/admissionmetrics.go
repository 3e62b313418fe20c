// Package admissionmetrics counts the answers of onepool's admission
// webhooks by outcome: the one series that shows a webhook refusing
// pods (or failing) before users notice.
package admissionmetrics

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// MetricName is the counter's name.
const MetricName = "onepool_webhook_admissions_total"

// Outcomes of an admission.
const (
	Allowed = "allowed" // let through unchanged
	Mutated = "mutated" // let through with a patch
	Denied  = "denied"  // refused: what the pod asks is not allowed
	Errored = "errored" // the webhook could not decide (bad request, internal error)
)

// Counter is the admissions counter, registered once for all webhooks.
type Counter struct{ vec *prometheus.CounterVec }

// New registers the counter with reg (nil: counted, not exported).
func New(reg prometheus.Registerer) (*Counter, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: "Admission requests answered by onepool's webhooks, by webhook (gpu, tenancy) and outcome: allowed, mutated, denied, errored.",
	}, []string{"webhook", "outcome"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			return nil, err
		}
	}
	return &Counter{vec: vec}, nil
}

// Wrap counts h's answers under webhook's name.
func (c *Counter) Wrap(webhook string, h admission.Handler) admission.Handler {
	for _, o := range []string{Allowed, Mutated, Denied, Errored} {
		c.vec.WithLabelValues(webhook, o) // every outcome at 0 from the start: rate() sees the first one
	}
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		resp := h.Handle(ctx, req)
		c.vec.WithLabelValues(webhook, Outcome(resp)).Inc()
		return resp
	})
}

// Outcome classifies an answer: admission.Denied answers 403, Errored
// any other code.
func Outcome(r admission.Response) string {
	switch {
	case r.Allowed && (len(r.Patches) > 0 || len(r.Patch) > 0):
		return Mutated
	case r.Allowed:
		return Allowed
	case r.Result != nil && r.Result.Code == http.StatusForbidden:
		return Denied
	default:
		return Errored
	}
}
