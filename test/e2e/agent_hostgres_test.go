package e2e

import (
	"bufio"
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

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/slurmrest/model"
	"github.com/onepool/onepool/test/lab"
)

// A host's slurmd numbers its GPUs from the host's gres.conf; the node
// agent (--host-gres-conf) must give each GPU the same GRES index. The
// lab's real slurmd (this release's) reads a gres.conf whose lines are
// neither in minor order nor grouped by type, for a node whose Gres= names
// the types in another order than the file; `slurmd -G` prints the GRES
// in the order it numbers them, and the agent's order must be that one.
func TestHostGresOrderIsSlurmds(t *testing.T) {
	l := lab.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const node = "hostgres-x"
	const nodeGres = "gpu:bbb:3,gpu:aaa:2"
	dev := func(n int) string { return fmt.Sprintf("/var/lib/fakegpu/nvidia%d", n) }
	gresConf := "AutoDetect=off\n" +
		"NodeName=" + node + " Name=gpu Type=aaa File=" + dev(6) + "\n" +
		"NodeName=" + node + " Name=gpu Type=bbb File=/var/lib/fakegpu/nvidia[4-5]\n" +
		"NodeName=other-[0-3] Name=gpu Type=aaa File=/var/lib/fakegpu/nvidia[0-7]\n" +
		"NodeName=" + node + " Name=gpu Type=aaa File=" + dev(1) + "\n" +
		"NodeName=" + node + " Name=gpu Type=bbb File=" + dev(0) + "\n"

	// A config of its own beside the lab's: the lab's settings, one node.
	inChroot := fmt.Sprintf("/tmp/e2e-hostgres-%d", time.Now().UnixNano())
	dir := filepath.Join(l.RootFS(), inChroot)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "spool"), 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	base, err := os.ReadFile(filepath.Join(l.RootFS(), "etc/slurm/slurm.conf"))
	require.NoError(t, err)
	var conf strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(base)))
	for sc.Scan() {
		line := sc.Text()
		key, _, _ := strings.Cut(line, "=")
		switch key {
		case "NodeName", "PartitionName", "NodeSet", "Include", "SlurmdSpoolDir", "SlurmdLogFile", "SlurmdPidFile":
			continue
		}
		conf.WriteString(line + "\n")
	}
	fmt.Fprintf(&conf, "SlurmdSpoolDir=%s/spool\nSlurmdPidFile=%s/slurmd.pid\n", inChroot, inChroot)
	fmt.Fprintf(&conf, "NodeName=%s NodeAddr=127.0.0.1 Port=26999 CPUs=1 RealMemory=100 Gres=%s State=UNKNOWN\nPartitionName=hostgres Nodes=%s\n", node, nodeGres, node)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.conf"), []byte(conf.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gres.conf"), []byte(gresConf), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte("CgroupPlugin=disabled\n"), 0o644))

	out, err := l.Slurm(ctx, "/bin/sh", "-c", fmt.Sprintf("/usr/sbin/slurmd -G -f %s/slurm.conf -N %s 2>&1", inChroot, node))
	require.NoError(t, err, "%s", out)
	slurmds := slurmdGresFiles(t, out)
	require.Len(t, slurmds, 5, "slurmd -G printed:\n%s", out)

	var gpus []agent.GPU
	for _, n := range []int{0, 1, 4, 5, 6} {
		gpus = append(gpus, agent.GPU{Index: n, Name: "NVIDIA H100 80GB HBM3", UUID: fmt.Sprintf("GPU-%d", n), Minor: n, Device: dev(n)})
	}
	lines, err := agent.ParseGresConf(gresConf, node)
	require.NoError(t, err)
	ordered, err := agent.HostGresOrder(gpus, lines, agent.NodeGresTypes(nodeGres))
	require.NoError(t, err)
	var agents []string
	for _, g := range ordered {
		agents = append(agents, g.Type()+":"+g.Device)
	}
	assert.Equal(t, slurmds, agents, "GRES index i: slurmd's (slurmd -G, Slurm %s) against the node agent's", l.Release().Name)
	t.Logf("Slurm %s numbers the host's GPUs %v; so does the agent", l.Release().Name, slurmds)
}

// slurmdGresFiles is what `slurmd -G` printed: each GPU's type:file, in
// the order slurmd numbers them (GRES index 0 first).
func slurmdGresFiles(t *testing.T, out []byte) []string {
	t.Helper()
	var gres []string
	line := regexp.MustCompile(`Gres Name=gpu Type=(\S+) .*File=(\S+)`)
	for _, m := range line.FindAllStringSubmatch(string(out), -1) {
		files, err := model.ExpandHostlist(m[2])
		require.NoError(t, err)
		for _, f := range files {
			gres = append(gres, m[1]+":"+f)
		}
	}
	return gres
}
