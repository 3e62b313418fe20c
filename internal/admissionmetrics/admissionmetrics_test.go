package admissionmetrics

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestOutcome(t *testing.T) {
	tests := []struct {
		name string
		resp admission.Response
		want string
	}{
		{"allowed", admission.Allowed(""), Allowed},
		{"allowed with a patch", admission.PatchResponseFromRaw([]byte(`{}`), []byte(`{"metadata":{"labels":{"a":"b"}}}`)), Mutated},
		{"denied", admission.Denied("tenant may not use QOS high"), Denied},
		{"bad request", admission.Errored(http.StatusBadRequest, errors.New("cannot decode")), Errored},
		{"internal error", admission.Errored(http.StatusInternalServerError, errors.New("cache")), Errored},
		{"not allowed, no result", admission.Response{}, Errored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, Outcome(tt.resp)) })
	}
}

func TestWrapCounts(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := New(reg)
	require.NoError(t, err)
	answers := []admission.Response{admission.Denied("no"), admission.Allowed(""), admission.Denied("no")}
	i := 0
	h := c.Wrap("tenancy", admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		i++
		return answers[i-1]
	}))
	for range answers {
		h.Handle(context.Background(), admission.Request{})
	}
	want := `# HELP onepool_webhook_admissions_total Admission requests answered by onepool's webhooks, by webhook (gpu, tenancy) and outcome: allowed, mutated, denied, errored.
# TYPE onepool_webhook_admissions_total counter
onepool_webhook_admissions_total{outcome="allowed",webhook="tenancy"} 1
onepool_webhook_admissions_total{outcome="denied",webhook="tenancy"} 2
onepool_webhook_admissions_total{outcome="errored",webhook="tenancy"} 0
onepool_webhook_admissions_total{outcome="mutated",webhook="tenancy"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName))
	_, err = New(reg)
	assert.Error(t, err, "a second registration is refused")
}
