package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// An existing Slurm cluster whose slurmd runs on the hosts (the lab's own
// Slurm, with a slurmd process for the real node), joined by the onepool
// chart alone: its hostAgent DaemonSet, rendered and applied as a GitOps
// tool would, runs on the Node the admin labelled, publishes its GPUs in
// the order the host's slurmd numbers them from the host's gres.conf (two
// types, lines out of minor order), and a pod placed by onepool's
// scheduler through Slurm sees exactly the device files of the GRES
// indices Slurm gave its job, and the NVIDIA driver's libraries (the lab's
// fake driver root, a shared mount as the GPU Operator's) where CUDA looks
// for them, and the runtime ran the spec's nvidia-cdi-hook. With the agent pod's own token, nobody can write another
// node's slices.
func TestHostAgentOnTheRealNode(t *testing.T) {
	if !lab.RealKubeletEnabled() {
		t.Skipf("the host agent runs on the lab's real node: %s=1 (make e2e-node)", lab.EnvRealKubelet)
	}
	if lab.ChartMode() {
		t.Skipf("the lab runs the onepool chart (%s=chart); this test applies its host agent beside the lab's processes", lab.EnvComponents)
	}
	l := lab.Shared(t)
	ctx := context.Background()
	node := lab.RealNodeName
	dev := func(n int) string { return fmt.Sprintf("%s/nvidia%d", lab.NodeFakeGPUDir, n) }

	// The host's gres.conf: the types in another order than the node's
	// Gres=, neither in minor order. slurmd numbers bbb's first.
	const nodeGres = "gpu:bbb:2,gpu:aaa:2"
	gresConf := "AutoDetect=off\n" +
		"NodeName=" + node + " Name=gpu Type=aaa File=" + dev(3) + "\n" +
		"NodeName=" + node + " Name=gpu Type=bbb File=" + dev(2) + "\n" +
		"NodeName=" + node + " Name=gpu Type=aaa File=" + dev(0) + "\n" +
		"NodeName=" + node + " Name=gpu Type=bbb File=" + dev(1) + "\n"
	h, err := l.StartHostSlurmd(ctx, node, nodeGres, gresConf)
	require.NoError(t, err)
	cl, err := l.Client()
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := l.StopHostSlurmd(context.Background(), h); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// What slurmd itself numbers them as.
	out, err := l.Slurm(ctx, "/bin/sh", "-c", fmt.Sprintf("/usr/sbin/slurmd -G -Z -N %s -f %s/slurm.conf --conf 'Gres=%s' 2>&1", node, h.ConfDir, nodeGres))
	require.NoError(t, err, "%s", out)
	slurmds := slurmdGresFiles(t, out)
	require.Len(t, slurmds, lab.NodeFakeGPUs, "slurmd -G printed:\n%s", out)

	// The admin's steps (README "Joining an existing Slurm cluster"): the
	// Node's label, then the chart's host agent.
	adminKubectl(t, l, "label", "--overwrite", "node", node, keys.LabelSlurmdOnHost+"=true")
	t.Cleanup(func() { quietKubectl(l, "label", "node", node, keys.LabelSlurmdOnHost+"-") })
	dir := t.TempDir()
	inv := filepath.Join(dir, "gpus.json")
	require.NoError(t, os.WriteFile(inv, []byte(lab.NodeGPUInventory()), 0o644))
	// A stand-in for the NVIDIA Container Toolkit's nvidia-cdi-hook: the
	// runtime runs it as the CDI spec says; it notes how.
	hook, hookLog := filepath.Join(dir, "nvidia-cdi-hook"), filepath.Join(dir, "hook.log")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho \"$*\" >> "+hookLog+"\ncat > /dev/null\n"), 0o755))
	rendered, err := l.HelmTemplate(ctx, "--show-only", "templates/host-agent.yaml",
		"--set", "hostAgent.enabled=true",
		"--set", "hostAgent.slurmConfDir="+h.HostConfDir, "--set", "hostAgent.mungeSocketDir="+h.MungeDir,
		"--set", "hostAgent.kubeletDir="+l.NodeKubeletDir(), "--set", "hostAgent.cdiDir="+l.NodeCDIDir(),
		"--set", "hostAgent.driverRoot="+l.NodeDriverRoot(), "--set", "hostAgent.cdiHook="+hook, "--set", "hostAgent.metricsPort=0",
		"--set-file", "hostAgent.gpuInventory="+inv,
		// The fake devices at the host's path: the CDI specs name them.
		"--set-json", `hostAgent.extraVolumes=[{"name":"fakegpu","hostPath":{"path":"`+lab.NodeFakeGPUDir+`","type":"Directory"}}]`,
		"--set-json", `hostAgent.extraVolumeMounts=[{"name":"fakegpu","mountPath":"`+lab.NodeFakeGPUDir+`"}]`,
		"--set", "hostAgent.image.registry=localhost", "--set", "hostAgent.image.tag=lab", "--set", "hostAgent.image.pullPolicy=Never")
	require.NoError(t, err, "%s", rendered)
	manifest := filepath.Join(dir, "host-agent.yaml")
	require.NoError(t, os.WriteFile(manifest, rendered, 0o644))
	adminKubectl(t, l, "apply", "-f", manifest)
	t.Cleanup(func() {
		quietKubectl(l, "delete", "--ignore-not-found", "--wait", "-f", manifest)
		// The Node's slice outlives its driver for a while: the slurm
		// chart's tests after this one publish their own for this Node.
		quietKubectl(l, "delete", "resourceslices", "--field-selector", "spec.nodeName="+node+",spec.driver="+keys.GPUDriverName)
	})

	agentPod := func() (*corev1.Pod, string) {
		pods := &corev1.PodList{}
		if err := cl.List(ctx, pods, client.InNamespace(lab.SystemNamespace), client.MatchingLabels{"app.kubernetes.io/component": "host-agent"}); err != nil {
			return nil, err.Error()
		}
		for i := range pods.Items {
			if pods.Items[i].Spec.NodeName == node {
				return &pods.Items[i], string(pods.Items[i].Status.Phase)
			}
		}
		return nil, fmt.Sprintf("%d host-agent pods, none on %s", len(pods.Items), node)
	}
	eventually(t, 2*time.Minute, "the host agent runs on the labelled Node", func() (bool, string) {
		p, st := agentPod()
		return p != nil && p.Status.Phase == corev1.PodRunning, st
	})

	// Its slice numbers the GPUs as slurmd does.
	devs := nodeSlice(t, cl, node, lab.NodeFakeGPUs)
	var agents []string
	for _, d := range devs {
		agents = append(agents, d.gresType+":"+dev(d.minor))
	}
	assert.Equal(t, slurmds, agents, "GRES index i: slurmd's (slurmd -G) against the host agent's ResourceSlice")

	t.Run("the host agent's credential writes only its own node's slices", func(t *testing.T) {
		p, st := agentPod()
		require.NotNil(t, p, st)
		tok := adminKubectl(t, l, "exec", "-n", p.Namespace, p.Name, "-c", "dra", "--", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
		onlyOwnNodeSlices(t, l, tok)
	})

	// A onepool pod asks two GPUs the usual way (the GPU webhook makes it
	// a claim), on this Node; Slurm places its job on the host's slurmd.
	e := newGPUClaimsEnv(t)
	p := e.pod("on-a-host", 2, map[string]string{keys.AnnotationJobPartition: lab.DynPartition})
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	p.Spec.Containers[0].Image = "localhost/onepool/login:lab"
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	// It lists its GPU devices and the driver's files its CDI spec gave it
	// where CUDA images look (the lab's fake driver: no driver inside).
	p.Spec.Containers[0].Command = []string{"sh", "-c", "echo devices: $(ls " + lab.NodeFakeGPUDir + "); " +
		"echo libs: $(ls /usr/local/nvidia/lib64); echo libcuda: $(cat /usr/local/nvidia/lib64/libcuda.so.1); " +
		"echo smi: $(/usr/local/nvidia/bin/nvidia-smi); exec sleep 3600"}
	p = e.create(p)
	require.Equal(t, node, e.waitBound(p.Name, 2*time.Minute))
	id := e.withJobID(p.Name).Annotations[keys.AnnotationJobID]
	require.NotEmpty(t, id)
	jobOut, err := l.Slurm(ctx, "scontrol", "show", "job", "-d", id)
	require.NoError(t, err, "%s", jobOut)
	assert.Contains(t, string(jobOut), "NodeList="+node, "the pod's job runs on the host's slurmd")
	idx := parseGresIndexes(t, string(jobOut))
	require.Len(t, idx, 2)
	var want []string
	for _, i := range idx {
		_, file, _ := strings.Cut(slurmds[i], ":")
		want = append(want, filepath.Base(file))
	}
	sort.Strings(want)
	eventually(t, 2*time.Minute, "the pod runs on the host (the kubelet had the host agent prepare its claim)", func() (bool, string) {
		got, err := e.get(p.Name)
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})
	var logs string
	eventually(t, time.Minute, "the pod prints its devices", func() (bool, string) {
		logs = adminKubectl(t, l, "logs", "-n", e.ns, p.Name)
		return strings.Contains(logs, "devices:"), logs
	})
	t.Logf("job %s has GRES %v on %s; slurmd numbers them %v; the container says: %s", id, idx, node, slurmds, strings.TrimSpace(logs))
	assert.Contains(t, logs, "devices: "+strings.Join(want, " ")+"\n", "the container sees exactly the device files slurmd gave GRES %v", idx)
	assert.Contains(t, logs, "libs: libcuda.so.1 libnvidia-ml.so.1\n", "the driver root's libraries, by soname, where CUDA looks")
	assert.Contains(t, logs, "libcuda: onepool lab: a fake libcuda.so", "the host's file, mounted")
	assert.Contains(t, logs, "smi: onepool lab: fake nvidia-smi", "the driver's nvidia-smi runs")
	ran, err := os.ReadFile(hookLog)
	require.NoError(t, err, "the runtime ran no nvidia-cdi-hook")
	assert.Contains(t, string(ran), "update-ldcache --folder /usr/local/nvidia/lib64\n", "the runtime ran the spec's ldcache hook, as NVIDIA's specs have it")

	// The pod goes: its job ends, and the claim (made for it) with it.
	claimName := podClaimName(e.withJobID(p.Name))
	zero := int64(0)
	require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	eventually(t, 90*time.Second, "the pod's job ends and its claim is gone", func() (bool, string) {
		out, _ := l.Slurm(ctx, "squeue", "-h", "-j", id, "-o", "%T")
		_, getErr := e.kc.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimName, metav1.GetOptions{})
		return strings.TrimSpace(string(out)) == "" && apierrors.IsNotFound(getErr), fmt.Sprintf("job: %q; claim: %v", out, getErr)
	})
}
