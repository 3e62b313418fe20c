package examples

import (
	"bytes"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// docs splits a YAML stream into documents.
func docs(t *testing.T, file string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// checkPodSpec: onepool places the pod, and every slurm annotation is one
// onepool reads.
func checkPodSpec(t *testing.T, what string, meta map[string]string, spec corev1.PodSpec) {
	t.Helper()
	if spec.SchedulerName != keys.SchedulerName {
		t.Errorf("%s: schedulerName %q, want %q", what, spec.SchedulerName, keys.SchedulerName)
	}
	known := map[string]bool{keys.AnnotationJobQOS: true, keys.AnnotationJobPartition: true, keys.AnnotationJobAccount: true,
		keys.AnnotationJobTimeLimit: true, keys.AnnotationJobExclusive: true}
	for k := range meta {
		if strings.HasPrefix(k, "slurm.onepool.dev/") && !known[k] {
			t.Errorf("%s: annotation %s is not one onepool reads", what, k)
		}
	}
}

func TestExamplesDecode(t *testing.T) {
	d := docs(t, "inference-deployment.yaml")
	if len(d) != 2 {
		t.Fatalf("inference-deployment.yaml: %d documents, want a Deployment and a Service", len(d))
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(d[0], &dep); err != nil {
		t.Fatalf("the Deployment: %v", err)
	}
	checkPodSpec(t, "Deployment", dep.Spec.Template.Annotations, dep.Spec.Template.Spec)
	var svc corev1.Service
	if err := yaml.UnmarshalStrict(d[1], &svc); err != nil {
		t.Fatalf("the Service: %v", err)
	}
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(docs(t, "batch-inference-job.yaml")[0], &job); err != nil {
		t.Fatalf("the Job: %v", err)
	}
	checkPodSpec(t, "Job", job.Spec.Template.Annotations, job.Spec.Template.Spec)
	// A shard Slurm preempts is no failure: the Job ignores DisruptionTarget.
	if pfp := job.Spec.PodFailurePolicy; pfp == nil || len(pfp.Rules) != 1 || pfp.Rules[0].Action != batchv1.PodFailurePolicyActionIgnore ||
		len(pfp.Rules[0].OnPodConditions) != 1 || pfp.Rules[0].OnPodConditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("the Job's podFailurePolicy does not ignore DisruptionTarget: %+v", job.Spec.PodFailurePolicy)
	}
	if _, err := os.Stat("training.sbatch"); err != nil {
		t.Fatal(err)
	}
}

// The example policies decode strictly, and the "serving" policy covers
// the inference examples' namespace and allows what their pods ask.
func TestExampleTenantPolicies(t *testing.T) {
	ps := map[string]*v1alpha1.TenantPolicy{}
	var list []*v1alpha1.TenantPolicy
	for _, d := range docs(t, "tenantpolicies.yaml") {
		p := &v1alpha1.TenantPolicy{}
		if err := yaml.UnmarshalStrict(d, p); err != nil {
			t.Fatalf("tenantpolicies.yaml: %v", err)
		}
		ps[p.Name] = p
		list = append(list, p)
	}
	d := docs(t, "inference-deployment.yaml")
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(d[0], &dep); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	ns.Name = dep.Namespace
	p, err := tenancy.Match(list, ns, "")
	if err != nil || p != ps["serving"] {
		t.Fatalf("namespace %s: policy %v, %v; want serving", dep.Namespace, p, err)
	}
	pod := &corev1.Pod{ObjectMeta: dep.Spec.Template.ObjectMeta, Spec: dep.Spec.Template.Spec}
	if _, err := tenancy.Decide(p, tenancy.AskOf(pod, tenancy.PodGPUs(pod))); err != nil {
		t.Errorf("the example Deployment under its policy: %v", err)
	}
}
