package slurmconf

import (
	"strings"
	"testing"
)

// The lab's two static nodes and three scale nodes, as package lab names them.
var (
	labNodes = []string{"gpu-0", "gpu-1"}
	simNodes = []string{"sim-0000", "sim-0001", "sim-0002"}
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
		if got := Hostlist(tc.prefix, tc.count, tc.width); got != tc.want {
			t.Errorf("Hostlist(%q, %d, %d) = %q, want %q", tc.prefix, tc.count, tc.width, got, tc.want)
		}
	}
}

func TestSlurmConf(t *testing.T) {
	c := Config{ControlHost: "vm", Nodes: labNodes, ExtraNodes: simNodes}
	conf := c.SlurmConf()
	for _, want := range []string{
		"SlurmctldHost=vm(127.0.0.1)",
		"NodeName=gpu-0 NodeAddr=127.0.0.1 NodeHostname=gpu-0 Port=26900 ",
		"NodeName=gpu-1 NodeAddr=127.0.0.1 NodeHostname=gpu-1 Port=26901 ",
		"Gres=gpu:h100:8",
		"PartitionName=main Nodes=gpu-[0-1] Default=YES",
		"NodeName=sim-[0000-0002] NodeAddr=127.0.0.1 ",
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
	if strings.Contains(Config{ControlHost: "vm", Nodes: labNodes}.SlurmConf(), "sim-") {
		t.Error("slurm.conf without extra nodes still names sim nodes")
	}
	if got, want := c.GresConf(), "NodeName=gpu-[0-1] Name=gpu Type=h100 File=/var/lib/fakegpu/nvidia[0-7]"; !strings.Contains(got, want) {
		t.Errorf("gres.conf = %q, want it to contain %q", got, want)
	}
}

func TestSlurmConfDynNodes(t *testing.T) {
	c := Config{ControlHost: "vm", Nodes: labNodes, ExtraNodes: simNodes, DynNodes: []string{"dyn-0", "dyn-1", "dyn-2", "dyn-3", "dyn-4"}}
	conf := c.SlurmConf()
	for _, want := range []string{
		"MaxNodeCount=26\n", // 2 + 3 + 5 + 16 spare
		"NodeSet=lab_dyn Feature=lab-dyn\n",
		"PartitionName=dyn Nodes=lab_dyn MaxTime=INFINITE State=UP\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	// They register themselves (slurmd -Z): slurm.conf must not list them.
	if strings.Contains(conf, "dyn-") {
		t.Errorf("slurm.conf names a dynamic node:\n%s", conf)
	}
	if conf := (Config{ControlHost: "vm", Nodes: labNodes}).SlurmConf(); strings.Contains(conf, "lab_dyn") {
		t.Error("slurm.conf without dynamic nodes still has their partition")
	}
}

func TestSlurmdbdConf(t *testing.T) {
	conf := Config{ControlHost: "vm"}.SlurmdbdConf("secret")
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
	for i, q := range LabQOS {
		if got := q.Line(); got != want[i] {
			t.Errorf("QOS %s: line %q, want %q", q.Name, got, want[i])
		}
	}
	if got := strings.Join(LabQOS[2].ModifyArgs(), " "); got != "modify qos where name=high set priority=1000 gracetime=0 preempt=low,normal preemptmode=cancel" {
		t.Errorf("modify args: %s", got)
	}
}

// MaxJobCount is written only when the lab asks for it (the scale
// benchmark's queue), so every other lab keeps Slurm's default.
func TestSlurmConfMaxJobCount(t *testing.T) {
	base := Config{ControlHost: "h", Nodes: []string{"gpu-0"}}
	if strings.Contains(base.SlurmConf(), "MaxJobCount") {
		t.Errorf("MaxJobCount written without being asked:\n%s", base.SlurmConf())
	}
	base.MaxJobCount = 60000
	if !strings.Contains(base.SlurmConf(), "\nMaxJobCount=60000\n") {
		t.Errorf("no MaxJobCount=60000 line:\n%s", base.SlurmConf())
	}
}

func TestQueueShrinks(t *testing.T) {
	conf := func(max int) string {
		return Config{ControlHost: "lab", Nodes: labNodes, ExtraNodes: simNodes, MaxJobCount: max}.SlurmConf()
	}
	for _, tc := range []struct {
		name     string
		old, new string
		want     bool
	}{
		{"no lab yet", "", conf(0), false},
		{"same default", conf(0), conf(0), false},
		{"a scale run after a plain lab", conf(0), conf(60000), false},
		{"a 1k run after a 50k run", conf(60000), conf(10200), true},
		{"the plain lab after a scale run", conf(60000), conf(0), true},
		{"a bigger scale run", conf(10200), conf(60000), false},
		{"case and spaces as an admin writes them", "maxjobcount = 20000\n", conf(0), true},
		{"an unreadable value counts as the default", "MaxJobCount=lots\n", conf(0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := QueueShrinks(tc.old, tc.new); got != tc.want {
				t.Errorf("QueueShrinks = %v, want %v (old MaxJobCount %d, new %d)", got, tc.want, MaxJobCountOf(tc.old), MaxJobCountOf(tc.new))
			}
		})
	}
}
