package agent

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hostGPUs(n int) []GPU {
	gpus := make([]GPU, n)
	for i := range gpus {
		gpus[i] = GPU{Index: i, Name: "NVIDIA H100 80GB HBM3", UUID: fmt.Sprintf("GPU-%d", i), Minor: i, Device: DefaultDevice(i)}
	}
	return gpus
}

func orderOf(gpus []GPU) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.Type() + ":" + g.Device
	}
	return out
}

// The order of the case slurmd -G was read on (24.11 and 26.05): types as
// the node's Gres= names them, then lines in file order, files as written.
func TestHostGresOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conf  string
		gres  string
		want  []string
		isErr string
	}{
		{name: "one line, a range", conf: "AutoDetect=off\nName=gpu Type=h100 File=/dev/nvidia[0-3]\n", gres: "gpu:h100:4",
			want: []string{"h100:/dev/nvidia0", "h100:/dev/nvidia1", "h100:/dev/nvidia2", "h100:/dev/nvidia3"}},
		{name: "lines in file order, not by minor", conf: "Name=gpu Type=h100 File=/dev/nvidia[2-3]\nName=gpu Type=h100 File=/dev/nvidia1,/dev/nvidia0\n",
			gres: "gpu:h100:4(S:0-1)", want: []string{"h100:/dev/nvidia2", "h100:/dev/nvidia3", "h100:/dev/nvidia1", "h100:/dev/nvidia0"}},
		{name: "types in the node's Gres= order", gres: "gpu:bbb:3,gpu:aaa:2",
			conf: "AutoDetect=off\nNodeName=hx Name=gpu Type=aaa File=/dev/nvidia4\nNodeName=hx Name=gpu Type=bbb File=/dev/nvidia[2-3]\n" +
				"NodeName=hx Name=gpu Type=aaa File=/dev/nvidia1\nNodeName=hx Name=gpu Type=bbb File=/dev/nvidia0\n",
			want: []string{"bbb:/dev/nvidia2", "bbb:/dev/nvidia3", "bbb:/dev/nvidia0", "aaa:/dev/nvidia4", "aaa:/dev/nvidia1"}},
		{name: "other nodes' and other GRES lines skipped; keys any case; comments", gres: "gpu:2",
			conf: "# the cluster's gres.conf\nNodeName=gpu-[10-19] Name=gpu File=/dev/nvidia[0-7]\nNodeName=hx Name=mps Count=100\n" +
				"nodename=h[w-z],hx name=gpu file=/dev/nvidia1 # second\nNodeName=hx Name=gpu File=/dev/nvidia0\n",
			want: []string{"nvidia_h100_80gb_hbm3:/dev/nvidia1", "nvidia_h100_80gb_hbm3:/dev/nvidia0"}},
		{name: "AutoDetect=nvml", conf: "AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-1]\n", gres: "gpu:2", isErr: "AutoDetect=nvml"},
		{name: "another node's AutoDetect", conf: "NodeName=other AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-1]\n", gres: "gpu:2",
			want: []string{"nvidia_h100_80gb_hbm3:/dev/nvidia0", "nvidia_h100_80gb_hbm3:/dev/nvidia1"}},
		{name: "no File=", conf: "Name=gpu Type=h100 Count=2\n", gres: "gpu:h100:2", isErr: "without File="},
		{name: "Include", conf: "Include /etc/slurm/gres.d/x.conf\n", gres: "gpu:2", isErr: "Include"},
		{name: "a file with no GPU", conf: "Name=gpu File=/dev/nvidia[0-2]\n", gres: "gpu:3", isErr: "File=/dev/nvidia2 names no GPU"},
		{name: "a GPU not listed", conf: "Name=gpu File=/dev/nvidia0\n", gres: "gpu:1", isErr: "does not list for this node: /dev/nvidia1"},
		{name: "a file twice", conf: "Name=gpu File=/dev/nvidia[0-1]\nName=gpu File=/dev/nvidia1\n", gres: "gpu:2", isErr: "listed twice"},
		{name: "a type slurm.conf lacks", conf: "Name=gpu Type=h100 File=/dev/nvidia0\nName=gpu Type=a100 File=/dev/nvidia1\n", gres: "gpu:h100:1",
			isErr: "Type=a100 is not in the node's Gres="},
		{name: "not key=value", conf: "Name=gpu File\n", gres: "gpu:2", isErr: "not key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 2
			if tc.want != nil {
				n = len(tc.want)
			}
			gpus := hostGPUs(n)
			if tc.isErr == "" {
				gpus = hostGPUs(len(tc.want))
			}
			lines, err := ParseGresConf(tc.conf, "hx")
			if err == nil {
				var got []GPU
				got, err = HostGresOrder(gpus, lines, NodeGresTypes(tc.gres))
				if tc.isErr == "" {
					require.NoError(t, err)
					assert.Equal(t, tc.want, orderOf(got))
					return
				}
			}
			require.ErrorIs(t, err, ErrGresConf)
			assert.ErrorContains(t, err, tc.isErr)
		})
	}
}

func TestNodeGresTypes(t *testing.T) {
	assert.Equal(t, []string{"bbb", "aaa"}, NodeGresTypes("gpu:bbb:3(S:0),gpu:aaa:2(S:1)"))
	assert.Equal(t, []string{""}, NodeGresTypes("gpu:8"))
	assert.Equal(t, []string{"h100"}, NodeGresTypes("tmpdisk:100,gpu:h100:8"))
	assert.Empty(t, NodeGresTypes(""))
}

func TestShowNodeGres(t *testing.T) {
	out := "NodeName=hx Arch=x86_64 CoresPerSocket=1\n   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.00\n   AvailableFeatures=(null)\n" +
		"   Gres=gpu:bbb:3(S:0),gpu:aaa:2(S:0)\n   NodeAddr=127.0.0.1 NodeHostName=hx\n"
	g, ok := ShowNodeGres(out)
	assert.True(t, ok)
	assert.Equal(t, []string{"bbb", "aaa"}, NodeGresTypes(g))
	_, ok = ShowNodeGres("NodeName=cpu-0\n   Gres=(null)\n")
	assert.False(t, ok)
	_, ok = ShowNodeGres("Node hx not found\n")
	assert.False(t, ok)
	assert.Equal(t, []string{"h100", "a100"}, GresConfTypes([]GresLine{{Type: "h100"}, {Type: "a100"}, {Type: "h100"}}))
}
