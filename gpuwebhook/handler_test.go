package gpuwebhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/onepool/onepool/keys"
)

func review(t *testing.T, op admissionv1.Operation, obj any) admission.Request {
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: op, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestHandler(t *testing.T) {
	h := NewHandler(clientgoscheme.Scheme)
	ctx := context.Background()

	resp := h.Handle(ctx, review(t, admissionv1.Create, pod(keys.SchedulerName, container("server", 2))))
	require.True(t, resp.Allowed, resp.Result)
	var paths []string
	for _, p := range resp.Patches {
		paths = append(paths, p.Operation+" "+p.Path)
	}
	assert.Contains(t, paths, "add /spec/resourceClaims")
	assert.Contains(t, paths, "add /metadata/annotations")
	assert.Contains(t, paths, "remove /spec/containers/0/resources/requests/nvidia.com~1gpu")
	assert.Contains(t, paths, "remove /spec/containers/0/resources/limits") // its only entry was the GPUs

	resp = h.Handle(ctx, review(t, admissionv1.Create, pod("default-scheduler", container("server", 2))))
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Patches)

	withClaim := pod(keys.SchedulerName, container("server", 1))
	withClaim.Spec.InitContainers = append(withClaim.Spec.InitContainers, container("warm", 1))
	resp = h.Handle(ctx, review(t, admissionv1.Create, withClaim))
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, `init container "warm"`)

	resp = h.Handle(ctx, review(t, admissionv1.Update, pod(keys.SchedulerName, container("server", 2))))
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Patches)

	bad := review(t, admissionv1.Create, pod(keys.SchedulerName))
	bad.Object.Raw = []byte("{not json")
	resp = h.Handle(ctx, bad)
	assert.False(t, resp.Allowed)
	assert.EqualValues(t, 400, resp.Result.Code)
}
