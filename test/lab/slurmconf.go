package lab

import (
	"fmt"
	"strings"
)

// slurmConfig is what the lab's slurm.conf depends on.
type slurmConfig struct {
	ControlHost string // the host's short name: slurmctld must find itself in SlurmctldHost
	Nodes       []string
	ExtraNodes  []string
	DynNodes    []string // only counted: they are not listed, they register themselves
}

// hostlist folds names like gpu-0 ... gpu-3 into a Slurm hostlist "gpu-[0-3]".
// Names must share the prefix and have numeric suffixes of equal width.
func hostlist(prefix string, count, width int) string {
	if count == 1 {
		return fmt.Sprintf("%s%0*d", prefix, width, 0)
	}
	return fmt.Sprintf("%s[%0*d-%0*d]", prefix, width, 0, width, count-1)
}

func (c slurmConfig) slurmConf() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Written by the onepool lab (test/lab); edits are overwritten by `make up`.")
	w("ClusterName=%s", ClusterName)
	w("SlurmctldHost=%s(127.0.0.1)", c.ControlHost)
	w("SlurmctldPort=%d", SlurmctldPort)
	w("SlurmdPort=%d", SlurmdPortBase)
	w("SlurmUser=slurm")
	w("SlurmdUser=root")
	w("AuthType=auth/munge")
	w("CredType=cred/munge")
	w("AuthAltTypes=auth/jwt")
	w("AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key")
	w("StateSaveLocation=/var/spool/slurmctld")
	w("SlurmdSpoolDir=/var/spool/slurmd/%%n")
	w("SlurmctldPidFile=/run/slurmctld.pid")
	w("SlurmdPidFile=/run/slurmd-%%n.pid")
	w("SlurmctldLogFile=/var/log/onepool/slurmctld.log")
	w("SlurmdLogFile=/var/log/onepool/slurmd-%%n.log")
	w("SlurmctldDebug=info")
	w("SlurmdDebug=info")
	// No systemd and no cgroups in the chroot: no task or accounting-gather plugin either.
	w("ProctrackType=proctrack/linuxproc")
	w("MpiDefault=none")
	w("SelectType=select/cons_tres")
	w("SelectTypeParameters=CR_Core_Memory")
	w("DefMemPerCPU=1024")
	w("GresTypes=gpu")
	w("ReturnToService=2")
	// Nodes claim 64 CPUs and 500 GB on a 2-core machine.
	w("SlurmdParameters=config_overrides")
	w("SlurmdTimeout=120")
	w("KillWait=30")
	w("MinJobAge=300")
	// Accounting through slurmdbd: associations and QOS are enforced, and a
	// job of QOS high preempts (cancels) jobs of QOS normal and low.
	w("AccountingStorageType=accounting_storage/slurmdbd")
	w("AccountingStorageHost=%s", c.ControlHost)
	w("AccountingStoragePort=%d", SlurmdbdPort)
	w("AccountingStorageEnforce=associations,limits,qos")
	w("AccountingStorageTRES=gres/gpu")
	w("JobCompType=jobcomp/none")
	w("PriorityType=priority/multifactor")
	w("PriorityWeightQOS=100000")
	w("PriorityWeightAge=0")
	w("PriorityWeightFairshare=0")
	w("PriorityWeightJobSize=0")
	w("PriorityWeightPartition=0")
	// slurmctld delays scheduling batch jobs by batch_sched_delay (3 s by
	// default); placeholder jobs of pods should start at the next pass.
	w("SchedulerParameters=batch_sched_delay=0")
	w("PreemptType=preempt/qos")
	w("PreemptMode=CANCEL")
	// A job that asks for a warning signal to its batch shell (sbatch
	// --signal=B:TERM@N) gets it when it is picked for preemption, at the
	// start of the QOS's GraceTime. Without it (and for jobs that ask for
	// none) the batch shell hears nothing until GraceTime has passed.
	w("PreemptParameters=send_user_signal")
	// onepool's release epilog holds a placeholder's node (COMPLETING)
	// until its pods are gone: the scheduler's immediate allocations have
	// no script to do it.
	w("Epilog=/etc/slurm/epilog.d/*")
	// Dynamic nodes (slurmd -Z) count against MaxNodeCount; 16 spare for tests.
	w("MaxNodeCount=%d", len(c.Nodes)+len(c.ExtraNodes)+len(c.DynNodes)+16)
	node := fmt.Sprintf("CPUs=%d RealMemory=%d Gres=gpu:%s:%d", NodeCPUs, NodeMemoryMB, GPUType, GPUsPerNode)
	for i, n := range c.Nodes {
		w("NodeName=%s NodeAddr=127.0.0.1 NodeHostname=%s Port=%d %s State=UNKNOWN", n, n, SlurmdPortBase+i, node)
	}
	w("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP", Partition, hostlist("gpu-", len(c.Nodes), 1))
	if len(c.ExtraNodes) > 0 {
		// Scale nodes have no slurmd. CLOUD keeps slurmctld from pinging
		// them, while they list, drain and resume like any node. Their
		// address is given: slurmctld resolves every node's name on start
		// and reconfigure, and a name that does not resolve costs it ~10 s
		// per node (1,000 nodes: unresponsive for many minutes, then the
		// nodes dropped).
		sim := hostlist("sim-", len(c.ExtraNodes), 4)
		w("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=%d Gres=gpu:%s:%d State=CLOUD", sim, NodeCPUs, NodeMemoryMB, GPUType, GPUsPerNode)
		w("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP", ScalePartition, sim)
	}
	if len(c.DynNodes) > 0 {
		// A dynamic node joins the NodeSet, and so the partition, through
		// the feature it registers with (slurmd -Z --conf "Feature=lab-dyn").
		w("NodeSet=%s Feature=%s", dynNodeSet, DynFeature)
		w("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP", DynPartition, dynNodeSet)
	}
	return b.String()
}

func (c slurmConfig) gresConf() string {
	return fmt.Sprintf("AutoDetect=off\nNodeName=%s Name=gpu Type=%s File=/var/lib/fakegpu/nvidia[0-%d]\n",
		hostlist("gpu-", len(c.Nodes), 1), GPUType, GPUsPerNode-1)
}

const cgroupConf = "CgroupPlugin=disabled\n"

// releaseEpilog is slurmd's Epilog in the lab: onepool-node-agent
// release-wait against the scheduler's release Service. Without the agent
// (not built) it holds nothing rather than failing (a failing Epilog
// drains the node).
var releaseEpilog = fmt.Sprintf(`#!/bin/sh
# Written by the onepool lab: hold a onepool placeholder's node until its pods are gone.
[ -x %[1]s ] || { echo "onepool: %[1]s missing; not holding the node" >&2; exit 0; }
exec %[1]s release-wait --release-url http://127.0.0.1:%[2]d --timeout 90s
`, AgentPath, ReleasePort)

// releaseEpilogPath is where the lab writes it in the chroot.
const releaseEpilogPath = "etc/slurm/epilog.d/50-onepool-release"
