package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// --host-gres-conf: the DRA driver's GRES indices are the host's
// gres.conf's, not onepool's own order; a gres.conf it cannot follow
// stops it with the reason.
func TestDRAInventoryFromHostGresConf(t *testing.T) {
	var gpus []agent.GPU
	for i := range 4 {
		gpus = append(gpus, agent.GPU{Index: i, Name: "NVIDIA H100 80GB HBM3", UUID: fmt.Sprintf("GPU-%d", i), Minor: i, Device: agent.DefaultDevice(i)})
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "gres.conf")
	require.NoError(t, os.WriteFile(conf, []byte("AutoDetect=off\nNodeName=node-[1-2] Name=gpu Type=h100 File=/dev/nvidia[2-3]\nNodeName=node-[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-1]\n"), 0o644))
	ctx := context.Background()

	own, err := draFlags{}.inventory(ctx, "node-1", gpus)
	require.NoError(t, err)
	assert.Equal(t, 0, own.GresIndex["gpu-0"], "onepool's own order without the flag")

	inv, err := draFlags{hostGresConf: conf}.inventory(ctx, "node-1", gpus)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"gpu-2": 0, "gpu-3": 1, "gpu-0": 2, "gpu-1": 3}, inv.GresIndex)
	assert.Equal(t, "h100", inv.ByName["gpu-0"].Type(), "gres.conf's Type=, not NVML's name")

	_, err = draFlags{hostGresConf: conf}.inventory(ctx, "node-7", gpus)
	assert.ErrorContains(t, err, "gres.conf does not list for this node", "a node gres.conf has no line for")
	_, err = draFlags{hostGresConf: filepath.Join(dir, "missing")}.inventory(ctx, "node-1", gpus)
	assert.ErrorContains(t, err, "--host-gres-conf")
}

// Without --node-name, a host's DRA driver (the onepool chart's hostAgent
// DaemonSet) is the Slurm node of its own Node, by the syncer's rule: the
// label's name, else the Node's; a Node it cannot read stops it.
func TestDRASlurmNodeFromItsNode(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-7"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-0-8", Labels: map[string]string{keys.LabelSlurmNodeName: "gpu-8"}}},
	)
	ctx := context.Background()
	for node, want := range map[string]string{"node-7": "node-7", "ip-10-0-0-8": "gpu-8"} {
		got, err := slurmNodeOf(ctx, client, node)
		require.NoError(t, err)
		assert.Equal(t, want, got, "Node %s", node)
	}
	_, err := slurmNodeOf(ctx, client, "node-9")
	assert.ErrorContains(t, err, "the Slurm node of Node node-9")
}
