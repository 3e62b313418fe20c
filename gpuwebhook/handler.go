package gpuwebhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the controller manager serves the webhook.
const Path = "/mutate-onepool-gpus"

// Handler is the admission handler around Mutate: pod creations only.
type Handler struct {
	decoder admission.Decoder
}

// NewHandler decodes pods with scheme (client-go's).
func NewHandler(scheme *runtime.Scheme) *Handler {
	return &Handler{decoder: admission.NewDecoder(scheme)}
}

// Handle implements admission.Handler.
func (h *Handler) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	changed, err := Mutate(pod)
	switch {
	case errors.Is(err, ErrRefused):
		return admission.Denied(err.Error())
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	case !changed:
		return admission.Allowed("")
	}
	b, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, b)
}
