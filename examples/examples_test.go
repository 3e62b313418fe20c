package examples

import (
	"bytes"
	"os"
	"slices"
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

// The examples run on the slurm chart's defaults: the partition and QOS
// they ask exist there, the training job's QOS preempts the inference
// replicas', whose pods stop within that QOS's grace time, and the
// tenant policies' QOS exist.
func TestExamplesFollowTheSlurmChart(t *testing.T) {
	raw, err := os.ReadFile("../charts/slurm/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Partitions []struct {
			Name string `json:"name"`
		} `json:"partitions"`
		Accounting struct {
			QOS []struct {
				Name      string   `json:"name"`
				Preempt   []string `json:"preempt"`
				GraceTime int64    `json:"graceTime"`
			} `json:"qos"`
		} `json:"accounting"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	partitions := map[string]bool{}
	for _, p := range values.Partitions {
		partitions[p.Name] = true
	}
	qos := map[string]int{}
	for i, q := range values.Accounting.QOS {
		qos[q.Name] = i
	}

	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(docs(t, "inference-deployment.yaml")[0], &dep); err != nil {
		t.Fatal(err)
	}
	ann := dep.Spec.Template.Annotations
	if p := ann[keys.AnnotationJobPartition]; !partitions[p] {
		t.Errorf("inference-deployment.yaml asks partition %q; the slurm chart has %v", p, partitions)
	}
	inference, ok := qos[ann[keys.AnnotationJobQOS]]
	if !ok {
		t.Fatalf("inference-deployment.yaml asks QOS %q; the slurm chart has %v", ann[keys.AnnotationJobQOS], qos)
	}
	grace := values.Accounting.QOS[inference].GraceTime
	if tg := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; tg == nil || *tg >= grace {
		t.Errorf("the replicas' terminationGracePeriodSeconds %v is not under QOS %s's graceTime %d", tg, ann[keys.AnnotationJobQOS], grace)
	}

	sbatch, err := os.ReadFile("training.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(sbatch), "\n") {
		if p, ok := strings.CutPrefix(line, "#SBATCH --partition="); ok && !partitions[p] {
			t.Errorf("training.sbatch asks partition %q; the slurm chart has %v", p, partitions)
		}
		if q, ok := strings.CutPrefix(line, "#SBATCH --qos="); ok {
			i, found := qos[q]
			if !found {
				t.Errorf("training.sbatch asks QOS %q; the slurm chart has %v", q, qos)
				continue
			}
			if !slices.Contains(values.Accounting.QOS[i].Preempt, ann[keys.AnnotationJobQOS]) {
				t.Errorf("training's QOS %s does not preempt the inference replicas' %s", q, ann[keys.AnnotationJobQOS])
			}
		}
	}

	for _, d := range docs(t, "tenantpolicies.yaml") {
		p := &v1alpha1.TenantPolicy{}
		if err := yaml.UnmarshalStrict(d, p); err != nil {
			t.Fatal(err)
		}
		for _, q := range append(slices.Clone(p.Spec.QOS.Allowed), p.Spec.QOS.Default) {
			if _, found := qos[q]; q != "" && q != "*" && !found {
				t.Errorf("policy %s names QOS %q; the slurm chart has %v", p.Name, q, qos)
			}
		}
	}
}
