package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/internal/poolview"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// kubectlOnepool runs the plugin as a user would, with the lab's
// environment (lab env); extra replaces variables.
func kubectlOnepool(t *testing.T, l *lab.Lab, env []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(l.BinDir(), "kubectl-onepool"), args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+l.Kubeconfig(), "ONEPOOL_SLURMREST_URL="+l.RESTURL(),
		"ONEPOOL_SLURMREST_TOKEN_FILE="+l.TokenFile()), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// `kubectl onepool status` and `drains` on the lab: one node holds a plain
// Slurm job and two onepool pods; another is cordoned (onepool's drain),
// a third drained by an admin. Each GPU shows its holder, each drain its
// owner, as Slurm and the Nodes say.
func TestKubectlOnepoolStatusAndDrains(t *testing.T) {
	e := newSchedEnv(t)
	l := e.l
	const node, cordoned, adminDrained = "gpu-0", "gpu-1", "gpu-2"
	// The lab's static nodes' slurmd run as processes, as a host's would:
	// the syncer drains a cordoned one once it is labelled so.
	t.Cleanup(func() {
		quietKubectl(l, "uncordon", cordoned)
		eventuallyQuiet(30*time.Second, func() bool {
			return !strings.Contains(scontrolNode(t, l, cordoned)["State"], "DRAIN")
		})
		quietKubectl(l, "label", "node", cordoned, keys.LabelSlurmdOnHost+"-")
		quietKubectl(l, append([]string{"annotate", "node", cordoned, keys.AnnotationCordonReason + "-"}, dashed(keys.NodeDrainAnnotations())...)...)
		for _, n := range []string{cordoned, adminDrained} {
			if strings.Contains(scontrolNode(t, l, n)["State"], "DRAIN") {
				_, _ = l.Slurm(context.Background(), "scontrol", "update", "nodename="+n, "state=resume")
			}
		}
	})
	mustKubectl(t, l, "label", "node", cordoned, keys.LabelSlurmdOnHost+"=true", "--overwrite")

	// A Slurm user's job on the node, and two pods placed there through Slurm.
	batch := strings.TrimSpace(e.slurm("sbatch", "--parsable", "-w", node, "--gres=gpu:1", "--wrap", "sleep 600"))
	t.Cleanup(func() { _, _ = l.Slurm(context.Background(), "scancel", batch) })
	pods := map[string]string{} // pod -> its job
	for _, name := range []string{"infer-a", "infer-b"} {
		p := e.pod(name, 2, nil)
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		e.create(p)
	}
	for _, name := range []string{"infer-a", "infer-b"} {
		require.Equal(t, node, e.waitBound(name, 90*time.Second))
		pods[name] = e.withJobID(name).Annotations[keys.AnnotationJobID]
	}
	// Another team's pod that names the batch job (anyone who may edit a
	// pod can write the annotation): never shown as holding its GPU.
	other := newSchedEnv(t)
	impostor := other.pod("impostor", 0, map[string]string{keys.AnnotationJobID: batch})
	impostor.Spec.SchedulerName = "tenant-b-scheduler"
	other.create(impostor)
	eventually(t, time.Minute, "the batch job runs", func() (bool, string) {
		out := e.slurm("squeue", "-h", "-j", batch, "-o", "%T")
		return strings.TrimSpace(out) == "RUNNING", out
	})

	// onepool's drain (a cordon with words) and an admin's.
	mustKubectl(t, l, "annotate", "node", cordoned, keys.AnnotationCordonReason+"=disk swap", "--overwrite")
	mustKubectl(t, l, "cordon", cordoned)
	e.slurm("scontrol", "update", "nodename="+adminDrained, "state=drain", "reason=bad psu")

	var view []poolview.Node
	eventually(t, time.Minute, "the view shows both drains and the node's holders", func() (bool, string) {
		out, stderr, err := kubectlOnepool(t, l, nil, "status", "-o", "json")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, stderr)
		}
		var doc struct{ Nodes []poolview.Node }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return false, err.Error()
		}
		view = doc.Nodes
		owners := map[string]string{}
		held := 0
		for _, n := range view {
			owners[n.SlurmNode] = n.DrainOwner
			if n.SlurmNode == node {
				for _, g := range n.GPUs {
					if g.Job != 0 {
						held++
					}
				}
			}
		}
		return owners[cordoned] == "syncer" && owners[adminDrained] == "admin" && held == 5, out
	})

	// The node's GPUs, index by index: the batch job's as the user's, the
	// pods' by name with their jobs; the rest free.
	holders := map[string]int{}
	for _, n := range view {
		if n.SlurmNode != node {
			continue
		}
		assert.Equal(t, node, n.Node)
		assert.Equal(t, "Ready", n.Kubernetes)
		assert.Len(t, n.GPUs, lab.GPUsPerNode)
		for _, g := range n.GPUs {
			holders[g.Holder()]++
		}
	}
	assert.Equal(t, map[string]int{
		"job " + batch + " root/" + lab.Account:                       1,
		fmt.Sprintf("pod %s/infer-a (job %s)", e.ns, pods["infer-a"]): 2,
		fmt.Sprintf("pod %s/infer-b (job %s)", e.ns, pods["infer-b"]): 2,
		"free": lab.GPUsPerNode - 5,
	}, holders)

	// The table a user reads, and the drains.
	out, stderr, err := kubectlOnepool(t, l, nil, "status", "--node", node+","+cordoned)
	require.NoError(t, err, stderr)
	t.Logf("kubectl onepool status --node %s,%s:\n%s", node, cordoned, out)
	assert.Regexp(t, `(?m)^`+node+` +Ready +`+node+` +MIXED +- +- +3/8$`, out)
	assert.Regexp(t, `(?m)^`+cordoned+` +Ready,SchedulingDisabled +`+cordoned+` +IDLE\+DRAIN +syncer +onepool: node cordoned: disk swap +8/8$`, out)
	assert.Regexp(t, fmt.Sprintf(`(?m)^%s +\d +h100 +pod %s/infer-a \(job %s\)$`, node, e.ns, pods["infer-a"]), out)
	assert.Regexp(t, fmt.Sprintf(`(?m)^%s +\d +h100 +job %s root/%s$`, node, batch, lab.Account), out)
	assert.NotContains(t, out, adminDrained, "--node")
	assert.NotContains(t, out, "impostor", "a pod that only names a job in its annotation")

	out, stderr, err = kubectlOnepool(t, l, nil, "drains")
	require.NoError(t, err, stderr)
	t.Logf("kubectl onepool drains:\n%s", out)
	assert.Regexp(t, `(?m)^`+cordoned+` +`+cordoned+` +syncer +\S+ +\S+ +true +onepool: node cordoned: disk swap$`, out)
	assert.Regexp(t, `(?m)^`+adminDrained+` +`+adminDrained+` +admin +root +\S+ +false +bad psu$`, out)

	out, _, err = kubectlOnepool(t, l, nil, "status", "--namespace", e.ns)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^`+node+` `, out, "--namespace keeps the node its pods hold GPUs on")
	assert.NotRegexp(t, `(?m)^`+cordoned+` `, out)

	// explain: a pod that runs, and one that waits in Slurm's queue (the
	// node it must go to has 3 GPUs left, it asks 4).
	out, stderr, err = kubectlOnepool(t, l, nil, "explain", "pod", "infer-a", "-n", e.ns)
	require.NoError(t, err, stderr)
	t.Logf("kubectl onepool explain pod infer-a:\n%s", out)
	assert.Contains(t, out, "Pod:        "+e.ns+"/infer-a (")
	assert.Contains(t, out, "Node:       "+node)
	assert.Regexp(t, `Slurm job:  `+pods["infer-a"]+` RUNNING, partition \S+, QOS \S+, account `+lab.Account, out)
	assert.Contains(t, out, "SlurmJobSubmitted")
	waiting := e.pod("infer-c", 4, nil)
	waiting.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	e.create(waiting)
	eventually(t, time.Minute, "explain shows infer-c waiting in Slurm's queue", func() (bool, string) {
		out, stderr, err = kubectlOnepool(t, l, nil, "explain", "infer-c", "--namespace", e.ns)
		return err == nil && regexp.MustCompile(`Slurm job:  \d+ PENDING \(\w+\)`).MatchString(out) &&
			regexp.MustCompile(`pending: \d+ of \d+ in partition`).MatchString(out), out + stderr
	})
	t.Logf("kubectl onepool explain infer-c:\n%s", out)
	assert.Contains(t, out, "Scheduled:  False Unschedulable:")

	_, stderr, err = kubectlOnepool(t, l, nil, "explain", "pod", "no-such-pod", "-n", e.ns)
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, stderr, "pod "+e.ns+"/no-such-pod not found")
}

// Bad input: Slurm out of reach still shows Kubernetes' side and says so
// (exit 1); a token slurmrestd refuses likewise, the token not shown; an
// unknown command or output is a usage error (exit 2).
func TestKubectlOnepoolBadInput(t *testing.T) {
	l := lab.Shared(t)
	out, stderr, err := kubectlOnepool(t, l, []string{"ONEPOOL_SLURMREST_URL=http://127.0.0.1:1"}, "status")
	require.Error(t, err)
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, stderr, "Slurm could not be read, only Kubernetes' side is shown")
	assert.Regexp(t, `(?m)^gpu-0 +Ready +- +- `, out, "the Nodes still listed")

	bad := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(bad, []byte("not-a-valid-jwt\n"), 0o600))
	_, stderr, err = kubectlOnepool(t, l, []string{"ONEPOOL_SLURMREST_TOKEN_FILE=" + bad}, "drains")
	assert.Equal(t, 1, exitCode(err))
	assert.Contains(t, stderr, "Slurm could not be read")
	assert.NotContains(t, stderr, "not-a-valid-jwt")

	_, stderr, err = kubectlOnepool(t, l, nil, "explode")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, stderr, `unknown command "explode"`)
	_, stderr, err = kubectlOnepool(t, l, nil, "status", "-o", "xml")
	assert.Equal(t, 2, exitCode(err))
	assert.Contains(t, stderr, "-o xml")
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

func mustKubectl(t *testing.T, l *lab.Lab, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, l.Kubectl(), append([]string{"--kubeconfig", l.Kubeconfig()}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func dashed(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "-"
	}
	return out
}

// eventuallyQuiet waits for cond, bounded, for cleanups: no failure.
func eventuallyQuiet(d time.Duration, cond func() bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if cond() {
			return
		}
	}
}
