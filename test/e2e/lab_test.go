package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
)

// The README promises: after `make up`, kubectl and sinfo show the same GPU nodes.
func TestKubectlAndSinfoShowTheSameNodes(t *testing.T) {
	l := lab.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := l.Slurm(ctx, "sinfo", "-h", "-N", "-p", lab.Partition, "-o", "%N %G")
	if err != nil {
		t.Fatal(err)
	}
	var sinfo []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] != "gpu:h100:8" {
			t.Errorf("sinfo line %q: want NODE gpu:h100:8", line)
			continue
		}
		sinfo = append(sinfo, f[0])
	}
	eventually(t, 30*time.Second, "kwok nodes Ready with 8 GPUs", func() (bool, string) {
		cmd := exec.CommandContext(ctx, l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "get", "nodes", "-l", lab.LabNodeLabel,
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.allocatable.nvidia\.com/gpu} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		b, err := cmd.CombinedOutput()
		if err != nil {
			return false, string(b)
		}
		var kube []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[1] != "8" || f[2] != "True" {
				return false, line
			}
			if strings.HasPrefix(f[0], "gpu-") {
				kube = append(kube, f[0])
			}
		}
		slices.Sort(kube)
		return slices.Equal(kube, sinfo), "kubectl: " + strings.Join(kube, ",") + " sinfo: " + strings.Join(sinfo, ",")
	})
}
