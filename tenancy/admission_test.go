package tenancy

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

func TestAdmission(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	teamB := policy("team-b", []string{"ml-b"}, nil, func(s *v1alpha1.TenantPolicySpec) {
		s.QOS = v1alpha1.Choice{Allowed: []string{"normal"}, Default: "normal"}
		s.MaxGPUsPerPod = 2
	})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(teamB, ns("ml-b", nil), ns("nobody", nil)).Build()
	// The API server knows a namespace the cache has not seen yet.
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns("ml-b-new", nil)).Build()
	teamB.Spec.Namespaces.Names = append(teamB.Spec.Namespaces.Names, "ml-b-new")
	require.NoError(t, c.Update(context.Background(), teamB))
	a := NewAdmission(scheme, c, live, "")

	pod := func(ns string, sched string, qos string, gpus int64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Annotations: map[string]string{}},
			Spec: corev1.PodSpec{SchedulerName: sched, Containers: []corev1.Container{{Name: "c"}}}}
		if qos != "" {
			p.Annotations[keys.AnnotationJobQOS] = qos
		}
		if gpus > 0 {
			p.Annotations[keys.AnnotationGPUs] = strconv.FormatInt(gpus, 10)
		}
		return p
	}
	review := func(op admissionv1.Operation, p, old *corev1.Pod) admission.Request {
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		r := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: p.Namespace,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}}
		if old != nil {
			oraw, err := json.Marshal(old)
			require.NoError(t, err)
			r.OldObject = runtime.RawExtension{Raw: oraw}
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		req     admission.Request
		allowed bool
		says    string
	}{
		{"an allowed ask", review(admissionv1.Create, pod("ml-b", "onepool", "normal", 1), nil), true, ""},
		{"QOS high", review(admissionv1.Create, pod("ml-b", "onepool", "high", 1), nil), false, `TenantPolicy "team-b" does not allow QOS "high" (allowed: normal)`},
		{"too many GPUs", review(admissionv1.Create, pod("ml-b", "onepool", "", 3), nil), false, `GPUs per pod "3"`},
		{"no policy covers the namespace", review(admissionv1.Create, pod("nobody", "onepool", "", 1), nil), false, `no TenantPolicy covers the namespace "nobody"`},
		{"another scheduler's pod", review(admissionv1.Create, pod("nobody", "default-scheduler", "high", 1), nil), true, ""},
		{"an update that keeps the ask", review(admissionv1.Update, pod("ml-b", "onepool", "high", 1), pod("ml-b", "onepool", "high", 1)), true, ""},
		{"an update that changes the ask", review(admissionv1.Update, pod("ml-b", "onepool", "high", 1), pod("ml-b", "onepool", "normal", 1)), false, `QOS "high"`},
		{"a namespace only the API server knows yet", review(admissionv1.Create, pod("ml-b-new", "onepool", "high", 1), nil), false, `TenantPolicy "team-b" does not allow QOS "high"`},
		{"a namespace nobody knows: admitted with a warning", review(admissionv1.Create, pod("ghost", "onepool", "high", 1), nil), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := a.Handle(context.Background(), tc.req)
			assert.Equal(t, tc.allowed, resp.Allowed, "%+v", resp.Result)
			if tc.says != "" {
				assert.Contains(t, resp.Result.Message, tc.says)
			}
			if tc.allowed && tc.req.Namespace == "ghost" {
				require.Len(t, resp.Warnings, 1)
				assert.Contains(t, resp.Warnings[0], "the scheduler checks it before")
			}
		})
	}
}
