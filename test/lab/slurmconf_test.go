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
	if strings.Contains(slurmConfig{ControlHost: "vm", Nodes: l.NodeNames()}.slurmConf(), "sim-") {
		t.Error("slurm.conf without extra nodes still names sim nodes")
	}
	if got, want := c.gresConf(), "NodeName=gpu-[0-1] Name=gpu Type=h100 File=/var/lib/fakegpu/nvidia[0-7]"; !strings.Contains(got, want) {
		t.Errorf("gres.conf = %q, want it to contain %q", got, want)
	}
}

func TestSlurmConfDynNodes(t *testing.T) {
	l := &Lab{cfg: Config{Dir: "/x", Nodes: 2, ExtraNodes: 3, DynNodes: 5}}
	c := slurmConfig{ControlHost: "vm", Nodes: l.NodeNames(), ExtraNodes: l.ExtraNodeNames(), DynNodes: l.DynNodeNames()}
	conf := c.slurmConf()
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
	if conf := (slurmConfig{ControlHost: "vm", Nodes: l.NodeNames()}).slurmConf(); strings.Contains(conf, "lab_dyn") {
		t.Error("slurm.conf without dynamic nodes still has their partition")
	}
	for name, want := range map[string]int{"dyn-0": 26950, "dyn-31": 26981, "dyn-32": 0, "dyn-01": 0, "gpu-0": 0, "dyn-": 0} {
		if got, ok := DynSlurmdPort(name); got != want || ok != (want != 0) {
			t.Errorf("DynSlurmdPort(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

func TestFakeGPUInventory(t *testing.T) {
	inv := fakeGPUInventory()
	for _, want := range []string{`"name": "NVIDIA H100 80GB HBM3"`, `"uuid": "GPU-lab-7"`, `"minor": 7`,
		`"memoryMiB": 81559`, `"device": "/var/lib/fakegpu/nvidia7"`, `"index": 0`} {
		if !strings.Contains(inv, want) {
			t.Errorf("inventory lacks %s:\n%s", want, inv)
		}
	}
	if strings.Contains(inv, "nvidia8") {
		t.Errorf("inventory has more than 8 GPUs:\n%s", inv)
	}
}

func TestConfigFromEnvDynNodes(t *testing.T) {
	t.Setenv("ONEPOOL_LAB_DIR", "/x")
	for _, tc := range []struct {
		nodes, dyn string
		want       int
		ok         bool
	}{{"4", "", 5, true}, {"4", "0", 0, true}, {"4", "32", 32, true}, {"4", "33", 0, false}, {"51", "1", 0, false}, {"51", "0", 0, true}} {
		t.Setenv("ONEPOOL_LAB_NODES", tc.nodes)
		t.Setenv("ONEPOOL_LAB_DYN_NODES", tc.dyn)
		c, err := ConfigFromEnv()
		if (err == nil) != tc.ok || (tc.ok && c.DynNodes != tc.want) {
			t.Errorf("nodes %s dyn %q: DynNodes %d, err %v; want %d, ok %v", tc.nodes, tc.dyn, c.DynNodes, err, tc.want, tc.ok)
		}
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
