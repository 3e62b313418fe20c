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
		"AccountingStorageType=accounting_storage/slurmdbd",
		"AccountingStoragePort=26819",
		"AccountingStorageEnforce=associations,limits,qos",
		"PreemptType=preempt/qos",
		"PreemptMode=CANCEL",
		"PriorityWeightQOS=100000",
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

func TestSlurmdbdConf(t *testing.T) {
	conf := slurmConfig{ControlHost: "vm"}.slurmdbdConf("secret")
	for _, want := range []string{"DbdHost=vm\n", "DbdPort=26819\n", "StorageType=accounting_storage/mysql\n",
		"StoragePort=26306\n", "StoragePass=secret\n", "SlurmUser=slurm\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurmdbd.conf lacks %q:\n%s", want, conf)
		}
	}
}

func TestQOSLines(t *testing.T) {
	// What `sacctmgr -n -P list qos format=name,priority,gracetime,preempt,preemptmode` prints
	// for the lab's QOS (measured on Slurm 24.11.5).
	want := []string{"normal|10|00:00:30||cluster", "low|0|00:00:30||cluster", "high|1000|00:00:00|low,normal|cancel"}
	for i, q := range labQOS {
		if got := q.line(); got != want[i] {
			t.Errorf("QOS %s: line %q, want %q", q.name, got, want[i])
		}
	}
	if got := strings.Join(labQOS[2].modifyArgs(), " "); got != "modify qos where name=high set priority=1000 gracetime=0 preempt=low,normal preemptmode=cancel" {
		t.Errorf("modify args: %s", got)
	}
}
