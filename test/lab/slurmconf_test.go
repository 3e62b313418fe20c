package lab

import (
	"strings"
	"testing"
)

func TestHostlist(t *testing.T) {
	for _, tc := range []struct {
		prefix       string
		count, width int
		want         string
	}{
		{"gpu-", 1, 1, "gpu-0"},
		{"gpu-", 4, 1, "gpu-[0-3]"},
		{"sim-", 1000, 4, "sim-[0000-0999]"},
	} {
		if got := hostlist(tc.prefix, tc.count, tc.width); got != tc.want {
			t.Errorf("hostlist(%q, %d, %d) = %q, want %q", tc.prefix, tc.count, tc.width, got, tc.want)
		}
	}
}

func TestSlurmConf(t *testing.T) {
	l := &Lab{cfg: Config{Dir: "/x", Nodes: 2, ExtraNodes: 3}}
	c := slurmConfig{ControlHost: "vm", Nodes: l.NodeNames(), ExtraNodes: l.ExtraNodeNames()}
	conf := c.slurmConf()
	for _, want := range []string{
		"SlurmctldHost=vm(127.0.0.1)",
		"NodeName=gpu-0 NodeAddr=127.0.0.1 NodeHostname=gpu-0 Port=26900 ",
		"NodeName=gpu-1 NodeAddr=127.0.0.1 NodeHostname=gpu-1 Port=26901 ",
		"Gres=gpu:h100:8",
		"PartitionName=main Nodes=gpu-[0-1] Default=YES",
		"NodeName=sim-[0000-0002] ",
		"PartitionName=scale Nodes=sim-[0000-0002] ",
		"AuthAltTypes=auth/jwt",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(slurmConfig{ControlHost: "vm", Nodes: l.NodeNames()}.slurmConf(), "sim-") {
		t.Error("slurm.conf without extra nodes still names sim nodes")
	}
	if got, want := c.gresConf(), "NodeName=gpu-[0-1] Name=gpu Type=h100 File=/var/lib/fakegpu/nvidia[0-7]"; !strings.Contains(got, want) {
		t.Errorf("gres.conf = %q, want it to contain %q", got, want)
	}
}
