package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/agent/dra"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// fakeMIGNode writes the lab's fake MIG node (lab.MIGInventory: GPU 0
// partitioned 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, GPU 1 whole: layout
// lab.FakeMIGMixed) into a
// directory of the chroot, with its capability files: dir is its path in
// the chroot (where the node agent reads inv.json), hostInv the same
// inventory with the host's paths.
func fakeMIGNode(t *testing.T, l *lab.Lab) (dir, hostInv string) {
	t.Helper()
	dir = fmt.Sprintf("/tmp/e2e-mig-%d", time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(filepath.Join(l.RootFS(), dir)) })
	hostInv, err := l.WriteFakeMIGNode(dir, lab.FakeMIGMixed)
	require.NoError(t, err)
	return dir, hostInv
}

// wipeSlicesAfter removes node's onepool ResourceSlices when the test ends
// (registered before the test's NodeSet, it runs after the NodeSet is
// gone). The lab's dynamic nodes have no kubelet to wipe a driver's
// slices when it goes, as a real one does: a MIG slice left behind would
// hand the next test's claims MIG devices of a node that has none
// (soak-short-26.05 failed so in make ci-fresh of 2f8ca80).
func wipeSlicesAfter(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	c, err := l.Client()
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DeleteAllOf(ctx, &resourceapi.ResourceSlice{}, client.MatchingFields{"spec.nodeName": node, "spec.driver": keys.GPUDriverName}); err != nil {
			t.Errorf("cleanup: wipe %s's ResourceSlices: %v", node, err)
		}
	})
}

// A node with a partitioned GPU registers with the lab's real Slurm the
// way the node agent says (`onepool-node-agent detect`, the binary the lab
// runs, on the fake MIG inventory): typed GRES per MIG profile, a
// MultipleFiles line per MIG device. slurmd numbers them in the agent's
// order (`slurmd -G`), and Slurm's jobs asking a profile get the GRES
// index whose DRA device is a MIG device of that profile: two 1g.10gb jobs
// two different ones, a third waits; the 3g.40gb job the one 3g device;
// the whole GPU's type the whole GPU.
func TestMIGNodeRegistersTypedGres(t *testing.T) {
	l := lab.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node = "mig-e2e"

	dir, hostInv := fakeMIGNode(t, l)

	// What the agent registers, from its own binary in the chroot.
	out, err := l.Slurm(ctx, lab.AgentPath, "detect", "--gpu-inventory", dir+"/inv.json", "--expected-gpus", "2")
	require.NoError(t, err, "%s", out)
	text := string(out)
	gres := regexp.MustCompile(`(?m)^Gres=(\S+)$`).FindStringSubmatch(text)
	require.NotNil(t, gres, "detect printed:\n%s", text)
	assert.Equal(t, "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:"+agent.TypeName(lab.FakeGPUName)+":1", gres[1])
	_, gresConf, ok := strings.Cut(text, "# gres.conf\n")
	require.True(t, ok, "detect printed:\n%s", text)
	gresConf, _, _ = strings.Cut(gresConf, "\n# ")
	assert.Contains(t, gresConf, "Name=gpu Type=3g.40gb MultipleFiles=/var/lib/fakegpu/nvidia0,"+dir+"/nvidia-caps/nvidia-cap102,"+dir+"/nvidia-caps/nvidia-cap103\n")

	h, err := l.StartHostSlurmd(ctx, node, gres[1], gresConf)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := l.StopHostSlurmd(context.Background(), h); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// Runs before the slurmd stops (cleanups run last first): the jobs,
	// cancelled by their own cleanups, leave the node while its slurmd
	// can still end them, so the node record can go.
	t.Cleanup(func() { waitNodeEmpty(t, l, node) })
	// The DRA devices the agent would publish, from the same inventory.
	gpus, err := agent.Discover(ctx, &agent.Inventory{Path: hostInv})
	require.NoError(t, err)
	inv, err := dra.NewInventory(gpus)
	require.NoError(t, err)
	deviceAt := map[int]string{}
	for _, d := range inv.Devices {
		deviceAt[int(*d.Attributes[keys.GPUAttrGresIndex].IntValue)] = d.Name
	}

	// slurmd's own numbering: GRES index i is the agent's device i.
	g, err := l.Slurm(ctx, "/bin/sh", "-c", fmt.Sprintf("/usr/sbin/slurmd -G -Z -N %s -f %s/slurm.conf --conf 'Gres=%s' 2>&1", node, h.ConfDir, gres[1]))
	require.NoError(t, err, "%s", g)
	var slurmds, agents []string
	for _, m := range regexp.MustCompile(`Gres Name=gpu Type=(\S+) `).FindAllStringSubmatch(string(g), -1) {
		slurmds = append(slurmds, m[1])
	}
	for i := range len(deviceAt) {
		agents = append(agents, inv.ByName[deviceAt[i]].Type())
	}
	assert.Equal(t, agents, slurmds, "slurmd -G (Slurm %s) printed:\n%s", l.Release().Name, g)

	c := slurmClient(t, l)
	submit := func(gresReq string) uint32 {
		return mustSbatch(t, l, "-p", lab.DynPartition, "-w", node, "-n", "1", "--gres=gpu:"+gresReq, "-o", "/dev/null", "--wrap", "sleep 300")
	}
	gotDevice := func(id uint32) string {
		var dev string
		eventually(t, time.Minute, fmt.Sprintf("job %d running on %s", id, node), func() (bool, string) {
			j, err := c.GetJob(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			idx, err := j.GPUIndexes(node)
			if err != nil || len(idx) != 1 {
				return false, fmt.Sprintf("%s %v %v", j.State, idx, err)
			}
			dev = deviceAt[idx[0]]
			return true, ""
		})
		return dev
	}
	a, b := gotDevice(submit("1g.10gb:1")), gotDevice(submit("1g.10gb:1"))
	assert.NotEqual(t, a, b, "two 1g.10gb jobs, one MIG device")
	for _, d := range []string{a, b} {
		assert.Equal(t, "1g.10gb", inv.ByName[d].Type(), d)
	}
	third := submit("1g.10gb:1")
	holds(t, 5*time.Second, "a third 1g.10gb job waits: the node has two", func() (bool, string) {
		j, err := c.GetJob(ctx, third)
		if err != nil {
			return false, err.Error()
		}
		return j.State.Base() == "PENDING", fmt.Sprint(j.State)
	})
	assert.Equal(t, "gpu-0-mig-1-0", gotDevice(submit("3g.40gb:1")))
	assert.Equal(t, "gpu-1", gotDevice(submit(agent.TypeName(lab.FakeGPUName)+":1")))
	t.Logf("Slurm %s: %s; 1g.10gb jobs on %s and %s", l.Release().Name, gres[1], a, b)
}

// waitNodeEmpty waits (a minute at most) until Slurm lists no job on node.
func waitNodeEmpty(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := l.Slurm(ctx, "squeue", "-h", "-w", node, "-o", "%i")
		cancel()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("cleanup: jobs still on %s after a minute", node)
}
