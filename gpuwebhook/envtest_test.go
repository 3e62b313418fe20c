package gpuwebhook_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/onepool/onepool/gpuwebhook"
	"github.com/onepool/onepool/keys"
)

// chartWebhook is the MutatingWebhookConfiguration the onepool chart
// installs (helm template), for envtest to point at the test's server.
func chartWebhook(t *testing.T, helm string) *admissionregv1.MutatingWebhookConfiguration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "template", "onepool", filepath.Join("..", "charts", "onepool"),
		"--namespace", "onepool-system", "--kube-version", "1.35.0",
		"--set", "slurm.restURL=http://slurmrestd:6820", "--set", "slurm.tokenSecret.name=slurm-token",
		"--show-only", "templates/gpu-webhook.yaml")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	for _, doc := range strings.Split(string(out), "\n---") {
		if !strings.Contains(doc, "kind: MutatingWebhookConfiguration") {
			continue
		}
		var cfg admissionregv1.MutatingWebhookConfiguration
		require.NoError(t, yaml.Unmarshal([]byte(doc), &cfg))
		return &cfg
	}
	t.Fatalf("the chart renders no MutatingWebhookConfiguration:\n%s", out)
	return nil
}

// TestWebhookThroughTheAPIServer registers the chart's webhook with a real
// kube-apiserver (envtest: the lab's kube-apiserver and etcd, found through
// KUBEBUILDER_ASSETS, which `make unit` sets) and serves Handler behind
// it: what a user sees is the pod the apiserver stores, or its refusal.
func TestWebhookThroughTheAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS unset: run `make unit` (it builds kube-apiserver, etcd and helm into .lab/bin)")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			MutatingWebhooks: []*admissionregv1.MutatingWebhookConfiguration{chartWebhook(t, filepath.Join(assets, "helm"))},
		},
	}
	// The apiserver's own words, for a start that fails.
	var apiserverLog bytes.Buffer
	apiserver := env.ControlPlane.GetAPIServer()
	apiserver.Out, apiserver.Err = &apiserverLog, &apiserverLog
	// A network namespace with no default route (make ci-fresh) leaves the
	// apiserver no address to advertise of its own choosing.
	apiserver.Configure().Set("advertise-address", "127.0.0.1")
	cfg, err := env.Start()
	require.NoError(t, err, "kube-apiserver said:\n%s", lastLines(apiserverLog.String(), 20))
	t.Cleanup(func() { _ = env.Stop() })

	wo := env.WebhookInstallOptions
	srv := webhook.NewServer(webhook.Options{Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir})
	srv.Register(gpuwebhook.Path, &webhook.Admission{Handler: gpuwebhook.NewHandler(clientgoscheme.Scheme)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("webhook server: %v", err)
		}
	})

	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "infer"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "device-plugin", Labels: map[string]string{"onepool.dev/gpu-claims": "disabled"}}},
	} {
		_, err := kc.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	gpuPod := func(ns, name, scheduler string, gpus int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{
				Name: "server", Image: "vllm:lab",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuwebhook.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}},
			}}},
		}
	}
	// The webhook server may still be starting: a onepool pod is refused
	// (failurePolicy Fail) until it answers.
	var created *corev1.Pod
	require.Eventually(t, func() bool {
		created, err = kc.CoreV1().Pods("infer").Create(context.Background(), gpuPod("infer", "vllm-0", keys.SchedulerName, 2), metav1.CreateOptions{})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "a onepool pod is admitted once the webhook answers: %v", err)

	// The stored pod: no nvidia.com/gpu, onepool's claim, the count.
	c := created.Spec.Containers[0]
	assert.NotContains(t, c.Resources.Limits, gpuwebhook.ResourceGPU, "the device plugin's resource is gone")
	assert.Equal(t, "2", created.Annotations[keys.AnnotationGPUs])
	require.Len(t, created.Spec.ResourceClaims, 1)
	assert.Equal(t, keys.PodClaimGPUs, created.Spec.ResourceClaims[0].Name)
	require.Len(t, c.Resources.Claims, 1, "the container uses the claim")
	assert.Equal(t, keys.PodClaimGPUs, c.Resources.Claims[0].Name)

	// Other schedulers' pods, and namespaces labelled out, are never
	// changed (the apiserver does not even call the webhook).
	for _, p := range []*corev1.Pod{gpuPod("infer", "default-sched", "default-scheduler", 1), gpuPod("device-plugin", "onepool-dp", keys.SchedulerName, 1)} {
		got, err := kc.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
		require.NoError(t, err, p.Name)
		assert.Empty(t, got.Spec.ResourceClaims, "%s/%s", p.Namespace, p.Name)
		assert.Contains(t, got.Spec.Containers[0].Resources.Limits, gpuwebhook.ResourceGPU, "%s/%s keeps nvidia.com/gpu", p.Namespace, p.Name)
	}

	// A onepool pod that brings a claim of its own is refused, and the
	// user reads why.
	own := gpuPod("infer", "own-claim", keys.SchedulerName, 0)
	own.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: ptr.To("nic-1")}}
	_, err = kc.CoreV1().Pods("infer").Create(context.Background(), own, metav1.CreateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `resource claim "nic"`)
	assert.Contains(t, err.Error(), "denied the request")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
