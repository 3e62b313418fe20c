package nodeset

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmnode"
)

// The containers that get the node agent's environment: slurmd's (the
// agent runs slurmd) and, where the pod has one, the DRA driver's (the
// agent's dra command, apart from slurmd so that jobs see no credential).
const (
	slurmdContainer = "slurmd"
	draContainer    = "dra"
)

// defaultTolerations keep slurmd on a Node the way a DaemonSet's pods stay:
// a cordoned or unhealthy Node keeps its slurmd, and the syncer drains the
// Slurm node instead.
var defaultTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// templateHash identifies what a pod is made from: the template and the
// Slurm features it registers with. A change of either replaces the pods.
func templateHash(ns *v1alpha1.NodeSet) string {
	h := fnv.New64a()
	// json.Marshal of API structs does not fail; the hash only needs to be stable.
	// FeatureLabels only when set: the hash of a NodeSet without them is
	// what it was before they existed (no rolling update on an upgrade).
	var labels any
	if len(ns.Spec.Slurm.FeatureLabels) > 0 {
		labels = ns.Spec.Slurm.FeatureLabels
	}
	b, _ := json.Marshal(struct {
		T corev1.PodTemplateSpec
		F []string
		L any `json:",omitempty"`
	}{ns.Spec.Template, ns.Spec.Slurm.Features, labels})
	h.Write(b)
	return rand.SafeEncodeString(fmt.Sprintf("%016x", h.Sum64()))[:10]
}

// podTemplate is the NodeSet's pod without the per-node parts: the
// template with the NodeSet's selection and tolerations merged in.
func podTemplate(ns *v1alpha1.NodeSet, hash string) *corev1.Pod {
	t := ns.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	pod.Namespace = ns.Namespace
	pod.Labels = merge(pod.Labels, map[string]string{
		keys.LabelComponent:    keys.ComponentSlurmd,
		keys.LabelNodeSet:      ns.Name,
		keys.LabelTemplateHash: hash,
	})
	if len(ns.Spec.NodeSelector) > 0 {
		pod.Spec.NodeSelector = merge(pod.Spec.NodeSelector, ns.Spec.NodeSelector)
	}
	if ns.Spec.Affinity != nil {
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &corev1.Affinity{}
		}
		if pod.Spec.Affinity.NodeAffinity == nil {
			pod.Spec.Affinity.NodeAffinity = ns.Spec.Affinity.DeepCopy()
		} else if req := ns.Spec.Affinity.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			// Both must hold: every term of one ANDed with every term of the other.
			pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution =
				andSelectors(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, req)
		}
	}
	tol := append(append([]corev1.Toleration{}, pod.Spec.Tolerations...), ns.Spec.Tolerations...)
	for _, d := range defaultTolerations {
		if !hasToleration(tol, d) {
			tol = append(tol, d)
		}
	}
	pod.Spec.Tolerations = tol
	return pod
}

// feasible says whether the NodeSet wants slurmd on node: the selection
// matches and every NoSchedule/NoExecute taint is tolerated.
func feasible(tmpl *corev1.Pod, node *corev1.Node) (bool, error) {
	if node.DeletionTimestamp != nil {
		return false, nil
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(tmpl).Match(node)
	if err != nil || !ok {
		return false, err
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, tmpl.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated, nil
}

// buildPod is the slurmd pod for one Node, pinned to it.
func buildPod(ns *v1alpha1.NodeSet, tmpl *corev1.Pod, node *corev1.Node) *corev1.Pod {
	pod := tmpl.DeepCopy()
	slurmName := slurmnode.Of(node)
	pod.Name = podName(ns.Name, node.Name)
	features := strings.Join(nodeFeatures(ns.Spec.Slurm, node), ",")
	pod.Annotations = merge(pod.Annotations, map[string]string{keys.AnnotationSlurmNode: slurmName})
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ns, v1alpha1.GroupVersion.WithKind(v1alpha1.NodeSetKind))}
	pod.Spec.NodeName = node.Name
	env := []corev1.EnvVar{
		{Name: keys.EnvSlurmNodeName, Value: slurmName},
		{Name: keys.EnvSlurmFeatures, Value: features},
		{Name: keys.EnvKubeNodeName, Value: node.Name},
	}
	for _, i := range agentContainers(pod.Spec.Containers) {
		c := &pod.Spec.Containers[i]
		for _, e := range env {
			c.Env = setEnv(c.Env, e)
		}
	}
	return pod
}

// nodeFeatures are the Slurm features node registers with: the NodeSet's
// Features, then the values of its FeatureLabels the Node has, each once.
func nodeFeatures(spec v1alpha1.SlurmNodeSpec, node *corev1.Node) []string {
	out := slices.Clone(spec.Features)
	for _, key := range spec.FeatureLabels {
		if v := node.Labels[key]; v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// featuresToSet are the features a registered node of a NodeSet with
// FeatureLabels should have and does not (its Node's labels changed after
// its slurmd registered: Slurm keeps a dynamic node's features when slurmd
// registers again), or nil when Slurm has them (in any order).
func featuresToSet(spec v1alpha1.SlurmNodeSpec, node *corev1.Node, slurm []string) []string {
	if len(spec.FeatureLabels) == 0 || node == nil {
		return nil
	}
	want := nodeFeatures(spec, node)
	a, b := slices.Clone(want), slices.Clone(slurm)
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return nil
	}
	return want
}

// podName is <nodeset>-<node>; one name per Node makes a second create of
// the same pod fail with AlreadyExists instead of making a twin.
func podName(nodeSet, node string) string {
	name := nodeSet + "-" + node
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	return strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-len(suffix)], "-.") + suffix
}

// agentContainers: slurmd's container (else the first) and the DRA
// driver's, where there is one.
func agentContainers(cs []corev1.Container) []int {
	slurmd, dra := slurmdIndex(cs), -1
	for i, c := range cs {
		if c.Name == draContainer {
			dra = i
		}
	}
	var out []int
	for _, i := range []int{slurmd, dra} {
		if i >= 0 {
			out = append(out, i)
		}
	}
	return out
}

func setEnv(env []corev1.EnvVar, e corev1.EnvVar) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == e.Name {
			env[i] = e
			return env
		}
	}
	return append(env, e)
}

func merge(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

func hasToleration(list []corev1.Toleration, t corev1.Toleration) bool {
	for _, l := range list {
		if l.Key == t.Key && l.Effect == t.Effect && l.Operator == t.Operator {
			return true
		}
	}
	return false
}

// andSelectors is a node selector that matches where both a and b match.
func andSelectors(a, b *corev1.NodeSelector) *corev1.NodeSelector {
	if a == nil || len(a.NodeSelectorTerms) == 0 {
		return b.DeepCopy()
	}
	out := &corev1.NodeSelector{}
	for _, ta := range a.NodeSelectorTerms {
		for _, tb := range b.NodeSelectorTerms {
			out.NodeSelectorTerms = append(out.NodeSelectorTerms, corev1.NodeSelectorTerm{
				MatchExpressions: append(append([]corev1.NodeSelectorRequirement{}, ta.MatchExpressions...), tb.MatchExpressions...),
				MatchFields:      append(append([]corev1.NodeSelectorRequirement{}, ta.MatchFields...), tb.MatchFields...),
			})
		}
	}
	return out
}

// podFailed says every container of the pod stopped for good (the kubelet
// evicted it, or refused it at admission): it never runs slurmd again.
func podFailed(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
