package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/test/lab"
)

const (
	nodeSetNS = "onepool-e2e-nodeset"
	// The GRES type the node agent derives from the lab's fake inventory
	// ("NVIDIA H100 80GB HBM3"), as Slurm's own NVML plugin would.
	labGresType  = "nvidia_h100_80gb_hbm3"
	dynFeature   = "lab-dyn"
	dynPartition = "dyn"
)

// nodeSetEnv is one test's NodeSet over some of the lab's dynamic nodes.
type nodeSetEnv struct {
	t     *testing.T
	l     *lab.Lab
	c     client.Client
	name  string
	label string          // the Node label the NodeSet selects
	env   []corev1.EnvVar // more env for the slurmd container
	args  []string        // arguments of the node agent's run (a flag wins over the lab's env)
	gres  string          // the Gres= each member registers with ("": the lab's 8 GPUs)
	// counted: no static CPUs and memory in the template; the NodeSet
	// gives each node Slurm's share of its Node.
	counted bool
	// featureLabels: the NodeSet's FeatureLabels.
	featureLabels []string
}

func newNodeSetEnv(t *testing.T, name string) *nodeSetEnv {
	t.Helper()
	l := lab.Shared(t)
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := &nodeSetEnv{t: t, l: l, c: c, name: name, label: "e2e.onepool.dev/nodeset-" + name}
	if err := ensureNodeSetNamespace(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	e.cleanup()
	t.Cleanup(e.cleanup)
	return e
}

// ensureNodeSetNamespace makes the namespace the NodeSets of the tests
// and the soak live in, unless it is there.
func ensureNodeSetNamespace(ctx context.Context, c client.Client) error {
	return lab.ServeNodeSets(ctx, c, nodeSetNS)
}

// nodeSet is the NodeSet the tests apply: the node agent as slurmd's
// entrypoint, the lab's dynamic-node feature, 8 fake H100s per node.
func (e *nodeSetEnv) nodeSet(maxUnavailable int) *v1alpha1.NodeSet {
	mu := intstr.FromInt32(int32(maxUnavailable))
	static := []corev1.EnvVar{
		{Name: keys.EnvSlurmCPUs, Value: "16"},
		{Name: keys.EnvSlurmRealMemoryMB, Value: "64000"},
	}
	if e.counted {
		static = nil
	}
	return &v1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: nodeSetNS},
		Spec: v1alpha1.NodeSetSpec{
			NodeSelector: map[string]string{e.label: "true"},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "slurmd"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:    "slurmd",
					Image:   "onepool/node-agent:lab",
					Command: []string{"/usr/local/bin/onepool-node-agent", "run"},
					Args:    e.args,
					Env:     append(append(static, corev1.EnvVar{Name: "ONEPOOL_EXPECTED_GPUS", Value: "8"}), e.env...),
				}}},
			},
			Slurm:          v1alpha1.SlurmNodeSpec{Features: []string{dynFeature}, Partitions: []string{dynPartition}, FeatureLabels: e.featureLabels},
			UpdateStrategy: v1alpha1.UpdateStrategy{Type: v1alpha1.RollingUpdate, RollingUpdate: &v1alpha1.RollingUpdateStrategy{MaxUnavailable: &mu}},
		},
	}
}

// start labels nodes, applies the NodeSet and waits until every node is
// registered in Slurm with its GPUs.
func (e *nodeSetEnv) start(nodes []string, maxUnavailable int) {
	e.t.Helper()
	for _, n := range nodes {
		e.labelNode(n, true)
	}
	if err := e.c.Create(context.Background(), e.nodeSet(maxUnavailable)); err != nil {
		e.t.Fatal(err)
	}
	e.waitRegistered(nodes, 90*time.Second)
}

func (e *nodeSetEnv) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (e *nodeSetEnv) labelNode(node string, on bool) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	val := `"true"`
	if !on {
		val = "null"
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, e.label, val))
	if err := e.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatalf("label node %s: %v", node, err)
	}
}

func (e *nodeSetEnv) get() *v1alpha1.NodeSet {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	var ns v1alpha1.NodeSet
	if err := e.c.Get(ctx, types.NamespacedName{Namespace: nodeSetNS, Name: e.name}, &ns); err != nil {
		e.t.Fatalf("get NodeSet: %v", err)
	}
	return &ns
}

// pods are the NodeSet's live pods by node.
func (e *nodeSetEnv) pods() map[string]corev1.Pod {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	var list corev1.PodList
	if err := e.c.List(ctx, &list, client.InNamespace(nodeSetNS), client.MatchingLabels{keys.LabelNodeSet: e.name}); err != nil {
		e.t.Fatalf("list pods: %v", err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// slurmNode is `scontrol show node` for name, or nil when Slurm has none.
func (e *nodeSetEnv) slurmNode(name string) map[string]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, "scontrol", "show", "node", "-o", name)
	if err != nil {
		if strings.Contains(string(out), "not found") {
			return nil
		}
		e.t.Fatalf("scontrol show node %s: %v %s", name, err, out)
	}
	return parseKV(string(out))
}

// sinfo is `sinfo -N` over the given nodes: node → state (sinfo's words).
func (e *nodeSetEnv) sinfo(nodes []string) map[string]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, "sinfo", "-h", "-N", "-p", dynPartition, "-o", "%N %T")
	if err != nil {
		e.t.Fatalf("sinfo: %v %s", err, out)
	}
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && want[f[0]] {
			got[f[0]] = f[1]
		}
	}
	return got
}

var jobIDRe = regexp.MustCompile(`Submitted batch job (\d+)`)

// sbatch starts a sleeping job with one GPU on node and waits until it runs.
func (e *nodeSetEnv) sbatch(node string) string {
	e.t.Helper()
	return e.sbatchGres(node, 1)
}

// sbatchGres starts a sleeping job with n GPUs on node and waits until it runs.
func (e *nodeSetEnv) sbatchGres(node string, n int) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, "sbatch", "-p", dynPartition, "-w", node, fmt.Sprintf("--gres=gpu:%d", n), "-J", "e2e-"+e.name, "-o", "/dev/null", "--wrap", "sleep 600")
	m := jobIDRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		e.t.Fatalf("sbatch on %s: %v %s", node, err, out)
	}
	id := m[1]
	eventually(e.t, 30*time.Second, "job "+id+" runs on "+node, func() (bool, string) {
		out, _ := e.l.Slurm(context.Background(), "squeue", "-h", "-j", id, "-o", "%T %N")
		s := strings.TrimSpace(string(out))
		return s == "RUNNING "+node, s
	})
	return id
}

func (e *nodeSetEnv) scancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if out, err := e.l.Slurm(ctx, "scancel", id); err != nil {
		e.t.Errorf("scancel %s: %v %s", id, err, out)
	}
}

func (e *nodeSetEnv) kubectl(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(e.l.Kubectl(), append([]string{"--kubeconfig", e.l.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// waitRegistered waits until every node runs a Ready slurmd pod and is
// IDLE in Slurm with the GPUs the agent found.
// wantGres is the Gres= a member registers with.
func (e *nodeSetEnv) wantGres() string {
	if e.gres != "" {
		return e.gres
	}
	return "gpu:" + labGresType + ":8"
}

func (e *nodeSetEnv) waitRegistered(nodes []string, timeout time.Duration) {
	e.t.Helper()
	for _, n := range nodes {
		eventually(e.t, timeout, n+" registered in Slurm with its GPUs", func() (bool, string) {
			kv := e.slurmNode(n)
			if kv == nil {
				return false, "Slurm has no node " + n
			}
			return strings.HasPrefix(kv["State"], "IDLE") && !strings.Contains(kv["State"], "DRAIN") &&
					kv["Gres"] == e.wantGres(),
				fmt.Sprintf("State=%s Gres=%s Partitions=%s", kv["State"], kv["Gres"], kv["Partitions"])
		})
	}
}

// cleanup deletes the NodeSet and waits until its finalizer has taken
// every pod and Slurm node away, then unlabels the Nodes.
func (e *nodeSetEnv) cleanup() {
	ctx := context.Background()
	// The NodeSet never takes a node with a running job: end the test's jobs first.
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	_, _ = e.l.Slurm(cctx, "scancel", "-n", "e2e-"+e.name)
	cancel()
	ns := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: nodeSetNS}}
	_ = e.c.Delete(ctx, ns)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err == nil {
		e.t.Errorf("NodeSet %s still there 90 s after delete: finalizers %v, status %+v", e.name, ns.Finalizers, ns.Status)
	}
	for _, n := range e.l.DynNodeNames() {
		_ = e.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, e.label))))
	}
}
