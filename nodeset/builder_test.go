package nodeset

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

func testNodeSet() *v1alpha1.NodeSet {
	return &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "h100", Namespace: "slurm", UID: "u1"},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{"gpu": "h100"},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "slurmd"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "sidecar", Image: "busybox"},
					{Name: "slurmd", Image: "onepool/node-agent", Env: []corev1.EnvVar{{Name: keys.EnvSlurmNodeName, Value: "stale"}}},
				}},
			},
			Slurm: v1alpha1.SlurmNodeSpec{Features: []string{"h100", "ib"}},
		},
	}
}

func testNode(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestFeasible(t *testing.T) {
	ns := testNodeSet()
	ns.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	withAffinity := testNodeSet()
	withAffinity.Spec.Affinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
	}}
	gpu := map[string]string{"gpu": "h100"}
	for _, tc := range []struct {
		name string
		ns   *v1alpha1.NodeSet
		node *corev1.Node
		want bool
	}{
		{"label matches", ns, testNode("n", gpu), true},
		{"label missing", ns, testNode("n", map[string]string{"gpu": "a100"}), false},
		{"cordoned Node keeps its slurmd", ns, testNode("n", gpu, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), true},
		{"tolerated taint", ns, testNode("n", gpu, corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}), true},
		{"untolerated NoExecute taint", ns, testNode("n", gpu, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}), false},
		{"PreferNoSchedule does not matter", ns, testNode("n", gpu, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectPreferNoSchedule}), true},
		{"affinity and selector both hold", withAffinity, testNode("n", map[string]string{"gpu": "h100", "zone": "a"}), true},
		{"affinity fails", withAffinity, testNode("n", map[string]string{"gpu": "h100", "zone": "b"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := feasible(podTemplate(tc.ns, templateHash(tc.ns)), tc.node)
			if err != nil || got != tc.want {
				t.Fatalf("feasible = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestBuildPod(t *testing.T) {
	ns := testNodeSet()
	hash := templateHash(ns)
	node := testNode("node-7", map[string]string{"gpu": "h100", keys.LabelSlurmNodeName: "gpu007"})
	p := buildPod(ns, podTemplate(ns, hash), node)
	if p.Name != "h100-node-7" || p.Namespace != "slurm" || p.Spec.NodeName != "node-7" {
		t.Errorf("name/namespace/nodeName = %s/%s/%s", p.Name, p.Namespace, p.Spec.NodeName)
	}
	for k, v := range map[string]string{keys.LabelComponent: keys.ComponentSlurmd, keys.LabelNodeSet: "h100", keys.LabelTemplateHash: hash, "app": "slurmd"} {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if p.Annotations[keys.AnnotationSlurmNode] != "gpu007" {
		t.Errorf("slurm node annotation = %q", p.Annotations[keys.AnnotationSlurmNode])
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "NodeSet" || p.OwnerReferences[0].Controller == nil || !*p.OwnerReferences[0].Controller {
		t.Errorf("owner = %+v", p.OwnerReferences)
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[1].Env {
		env[e.Name] = e.Value
	}
	if env[keys.EnvSlurmNodeName] != "gpu007" || env[keys.EnvSlurmFeatures] != "h100,ib" || env[keys.EnvKubeNodeName] != node.Name || len(p.Spec.Containers[1].Env) != 3 {
		t.Errorf("slurmd env = %v", p.Spec.Containers[1].Env)
	}
	if len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("the sidecar got env %v", p.Spec.Containers[0].Env)
	}
	if len(ns.Spec.Template.Spec.Containers[1].Env) != 1 || ns.Spec.Template.Labels[keys.LabelNodeSet] != "" {
		t.Error("building a pod changed the NodeSet's template")
	}
}

func TestTemplateHash(t *testing.T) {
	a, b := testNodeSet(), testNodeSet()
	if templateHash(a) != templateHash(b) {
		t.Fatal("same spec, different hash")
	}
	b.Spec.NodeSelector["zone"] = "x"
	if templateHash(a) != templateHash(b) {
		t.Error("the node selector changes which Nodes, not the pods: the hash must stay")
	}
	b.Spec.Slurm.Features = []string{"h100"}
	if templateHash(a) == templateHash(b) {
		t.Error("features changed but the hash did not")
	}
	c := testNodeSet()
	c.Spec.Template.Spec.Containers[1].Image = "onepool/node-agent:v2"
	if templateHash(a) == templateHash(c) {
		t.Error("image changed but the hash did not")
	}
}

func TestPodName(t *testing.T) {
	long := strings.Repeat("n", 250)
	got := podName("h100", long)
	if len(got) > 253 || !strings.HasPrefix(got, "h100-nnn") {
		t.Fatalf("podName = %q (%d)", got, len(got))
	}
	if got == podName("h100", long+"x") {
		t.Fatal("two Nodes, one pod name")
	}
}

// The node agent's environment goes to slurmd's container and to the DRA
// driver's, never to a sidecar.
func TestAgentContainers(t *testing.T) {
	cs := func(names ...string) []corev1.Container {
		var out []corev1.Container
		for _, n := range names {
			out = append(out, corev1.Container{Name: n})
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		containers []corev1.Container
		want       []int
	}{
		{"slurmd alone", cs("slurmd"), []int{0}},
		{"a sidecar and slurmd", cs("sidecar", "slurmd"), []int{1}},
		{"slurmd and its DRA driver", cs("slurmd", "dra"), []int{0, 1}},
		{"no container named slurmd: the first", cs("agent", "sidecar"), []int{0}},
		{"the DRA driver first, no slurmd", cs("dra", "other"), []int{0}},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, agentContainers(tc.containers))
		})
	}

	ns := testNodeSet()
	ns.Spec.Template.Spec.Containers = append(ns.Spec.Template.Spec.Containers, corev1.Container{Name: "dra", Image: "onepool/node-agent"})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kube-7"}}
	p := buildPod(ns, podTemplate(ns, templateHash(ns)), node)
	for _, c := range p.Spec.Containers[1:] {
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		assert.Equal(t, "kube-7", env[keys.EnvSlurmNodeName], c.Name)
		assert.Equal(t, "kube-7", env[keys.EnvKubeNodeName], c.Name)
	}
	assert.Empty(t, p.Spec.Containers[0].Env, "the sidecar")
}

// FeatureLabels: the Node's label values become Slurm features after the
// NodeSet's own, each once; Slurm is told again when they change.
func TestFeatureLabels(t *testing.T) {
	ns := testNodeSet() // Features h100, ib
	ns.Spec.Slurm.FeatureLabels = []string{"nvidia.com/gpu.product", "topology/rack", "absent"}
	node := testNode("node-7", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology/rack": "ib", "gpu": "h100"})
	p := buildPod(ns, podTemplate(ns, templateHash(ns)), node)
	env := map[string]string{}
	for _, e := range p.Spec.Containers[1].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "h100,ib,NVIDIA-H100-80GB-HBM3", env[keys.EnvSlurmFeatures], "a value already among the features is not repeated; a missing label adds nothing")

	registered := []string{"ib", "NVIDIA-H100-80GB-HBM3", "h100"} // as Slurm lists them, in its order
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"same labels", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology/rack": "ib"}, nil},
		{"an unrelated label changed", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "other": "x"}, nil},
		{"the product changed", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H200"}, []string{"h100", "ib", "NVIDIA-H200"}},
		{"a label appeared", map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "absent": "x"}, []string{"h100", "ib", "NVIDIA-H100-80GB-HBM3", "x"}},
		{"the label went", map[string]string{}, []string{"h100", "ib"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, featuresToSet(ns.Spec.Slurm, testNode("node-7", tc.labels), registered))
		})
	}

	without := testNodeSet()
	assert.Nil(t, featuresToSet(without.Spec.Slurm, testNode("node-7", nil), []string{"something", "else"}),
		"without FeatureLabels Slurm's features are left as they are")
	assert.NotEqual(t, templateHash(without), templateHash(ns), "setting FeatureLabels is a template change")
}
