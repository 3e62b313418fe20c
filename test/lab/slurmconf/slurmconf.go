// Package slurmconf is what the lab tells Slurm: slurm.conf, gres.conf,
// cgroup.conf, slurmdbd.conf and MariaDB's config, as pure functions of the
// lab's nodes, and the names and numbers they share with the rest of the
// lab (cluster, partitions, ports, node shape, QOS, paths in the chroot).
// Nothing here runs anything; package lab writes these files into the
// rootfs and starts the daemons.
package slurmconf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Names shared by Slurm and Kubernetes in the lab.
const (
	ClusterName    = "onepool"
	Partition      = "main"
	ScalePartition = "scale"
	GPUsPerNode    = 8
	GPUType        = "h100"
	NodeCPUs       = 64
	NodeMemoryMB   = 512000
)

// Ports on 127.0.0.1, away from the daemons' defaults so a real Slurm on
// the host never collides with the lab.
const (
	SlurmctldPort  = 26817
	SlurmdbdPort   = 26819
	MariaDBPort    = 26306
	SlurmdPortBase = 26900
)

// Dynamic nodes join DynPartition through the NodeSet DynNodeSet, by the
// feature they register with (slurmd -Z --conf "Feature=lab-dyn").
const (
	DynPartition = "dyn"
	DynFeature   = "lab-dyn"
	DynNodeSet   = "lab_dyn"
)

// Accounting: MariaDB and slurmdbd in the chroot. MariaDB keeps its own data
// folder, config and socket; the Debian package's /var/lib/mysql and
// /etc/mysql/my.cnf are not used.
const (
	MariaDBConfPath  = "/etc/mysql/onepool-lab.cnf"
	MariaDBDataDir   = "/var/lib/onepool-mariadb"
	MariaDBRunDir    = "/run/onepool-mariadb"
	MariaDBSocket    = MariaDBRunDir + "/mariadb.sock"
	SlurmdbdConfPath = "/etc/slurm/slurmdbd.conf"
	DBDPassPath      = "/etc/slurm/onepool-dbd.pass"
	AcctDB           = "slurm_acct_db"
)

// JailPluginPath is where the jail SPANK plugin sits in the rootfs and in
// the Slurm images (plugstack.conf names it).
const JailPluginPath = "/usr/lib/x86_64-linux-gnu/slurm-wlm/onepool_jail.so"

// Config is what the files depend on: the control host's short name
// (slurmctld must find itself in SlurmctldHost) and the lab's nodes.
type Config struct {
	ControlHost string
	Nodes       []string
	ExtraNodes  []string
	DynNodes    []string // only counted: they are not listed, they register themselves
	// MaxJobCount is how many jobs slurmctld holds at once (0: Slurm's
	// default, 10,000); the scale benchmark queues tens of thousands.
	MaxJobCount int
}

// Hostlist folds names like gpu-0 ... gpu-3 into a Slurm hostlist "gpu-[0-3]".
// Names must share the prefix and have numeric suffixes of equal width.
func Hostlist(prefix string, count, width int) string {
	if count == 1 {
		return fmt.Sprintf("%s%0*d", prefix, width, 0)
	}
	return fmt.Sprintf("%s[%0*d-%0*d]", prefix, width, 0, width, count-1)
}

// SlurmConf is slurm.conf.
func (c Config) SlurmConf() string {
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
	if c.MaxJobCount > 0 {
		w("MaxJobCount=%d", c.MaxJobCount)
	}
	node := fmt.Sprintf("CPUs=%d RealMemory=%d Gres=gpu:%s:%d", NodeCPUs, NodeMemoryMB, GPUType, GPUsPerNode)
	for i, n := range c.Nodes {
		w("NodeName=%s NodeAddr=127.0.0.1 NodeHostname=%s Port=%d %s State=UNKNOWN", n, n, SlurmdPortBase+i, node)
	}
	w("PartitionName=%s Nodes=%s Default=YES MaxTime=INFINITE State=UP", Partition, Hostlist("gpu-", len(c.Nodes), 1))
	if len(c.ExtraNodes) > 0 {
		// Scale nodes have no slurmd. CLOUD keeps slurmctld from pinging
		// them, while they list, drain and resume like any node. Their
		// address is given: slurmctld resolves every node's name on start
		// and reconfigure, and a name that does not resolve costs it ~10 s
		// per node (1,000 nodes: unresponsive for many minutes, then the
		// nodes dropped).
		sim := Hostlist("sim-", len(c.ExtraNodes), 4)
		w("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=%d Gres=gpu:%s:%d State=CLOUD", sim, NodeCPUs, NodeMemoryMB, GPUType, GPUsPerNode)
		w("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP", ScalePartition, sim)
	}
	if len(c.DynNodes) > 0 {
		// A dynamic node joins the NodeSet, and so the partition, through
		// the feature it registers with (slurmd -Z --conf "Feature=lab-dyn").
		w("NodeSet=%s Feature=%s", DynNodeSet, DynFeature)
		w("PartitionName=%s Nodes=%s MaxTime=INFINITE State=UP", DynPartition, DynNodeSet)
	}
	return b.String()
}

// GresConf is gres.conf: the static nodes' fake devices.
func (c Config) GresConf() string {
	return fmt.Sprintf("AutoDetect=off\nNodeName=%s Name=gpu Type=%s File=/var/lib/fakegpu/nvidia[0-%d]\n",
		Hostlist("gpu-", len(c.Nodes), 1), GPUType, GPUsPerNode-1)
}

// CgroupConf is cgroup.conf: no cgroups in the chroot.
const CgroupConf = "CgroupPlugin=disabled\n"

// ReleaseEpilog is slurmd's Epilog in the lab: the node agent at agent
// (in the chroot) release-wait against the scheduler's release endpoint
// on 127.0.0.1:port. Without the agent (not built) it holds nothing rather
// than failing (a failing Epilog drains the node).
func ReleaseEpilog(agent string, port int) string {
	return fmt.Sprintf(`#!/bin/sh
# Written by the onepool lab: hold a onepool placeholder's node until its pods are gone.
[ -x %[1]s ] || { echo "onepool: %[1]s missing; not holding the node" >&2; exit 0; }
exec %[1]s release-wait --release-url http://127.0.0.1:%[2]d --timeout 90s
`, agent, port)
}

// ReleaseEpilogPath is where the lab writes it in the chroot.
const ReleaseEpilogPath = "etc/slurm/epilog.d/50-onepool-release"

// QOS names of the lab. QOSHigh preempts (cancels) jobs of QOSNormal and QOSLow.
const (
	QOSNormal = "normal"
	QOSLow    = "low"
	QOSHigh   = "high"
)

// QOS is one QOS as `sacctmgr list qos format=Name,Priority,GraceTime,Preempt,PreemptMode -P` prints it.
type QOS struct {
	Name, Priority string
	GraceSecs      int
	Preempt        string
	PreemptMode    string
}

// LabQOS is the QOS table the lab keeps. A preempted job of normal or low
// gets SIGTERM and up to GraceTime seconds before it is killed.
var LabQOS = []QOS{
	{QOSNormal, "10", 30, "", "cluster"},
	{QOSLow, "0", 30, "", "cluster"},
	{QOSHigh, "1000", 0, "low,normal", "cancel"},
}

// Line is the QOS as `sacctmgr -n -P list qos format=name,priority,gracetime,preempt,preemptmode` prints it.
func (q QOS) Line() string {
	grace := time.Duration(q.GraceSecs) * time.Second
	hms := fmt.Sprintf("%02d:%02d:%02d", int(grace.Hours()), int(grace.Minutes())%60, q.GraceSecs%60)
	return strings.Join([]string{q.Name, q.Priority, hms, q.Preempt, q.PreemptMode}, "|")
}

// ModifyArgs are sacctmgr's arguments that set the QOS as it should be.
func (q QOS) ModifyArgs() []string {
	// "preempt=" (nothing after it) clears the list, as preempt='' does in a shell.
	return []string{"modify", "qos", "where", "name=" + q.Name, "set",
		"priority=" + q.Priority, "gracetime=" + strconv.Itoa(q.GraceSecs), "preempt=" + q.Preempt, "preemptmode=" + q.PreemptMode}
}

// MariaDBConf is MariaDB's config: its own data folder, socket and port.
func MariaDBConf() string {
	return fmt.Sprintf(`# Written by the onepool lab (test/lab); edits are overwritten by `+"`make up`"+`.
[client]
socket = %[1]s
port = %[2]d

[mariadbd]
datadir = %[3]s
socket = %[1]s
pid-file = %[4]s/mariadbd.pid
port = %[2]d
bind-address = 127.0.0.1
skip-name-resolve
log-error = /var/log/onepool/mariadb.log
skip-log-bin
performance_schema = OFF
# Small and quick: a lab database holds a few hundred rows.
innodb_buffer_pool_size = 64M
innodb_log_file_size = 48M
innodb_flush_log_at_trx_commit = 2
# What Slurm's accounting guide asks for.
innodb_lock_wait_timeout = 900
max_allowed_packet = 16M
`, MariaDBSocket, MariaDBPort, MariaDBDataDir, MariaDBRunDir)
}

// SlurmdbdConf is slurmdbd.conf, with the database password pass.
func (c Config) SlurmdbdConf(pass string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Written by the onepool lab (test/lab); edits are overwritten by `make up`.")
	w("AuthType=auth/munge")
	w("AuthAltTypes=auth/jwt")
	w("AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key")
	w("DbdHost=%s", c.ControlHost)
	w("DbdAddr=127.0.0.1")
	w("DbdPort=%d", SlurmdbdPort)
	w("SlurmUser=slurm")
	w("DebugLevel=info")
	w("LogFile=/var/log/onepool/slurmdbd.log")
	w("PidFile=/run/slurmdbd.pid")
	w("StorageType=accounting_storage/mysql")
	w("StorageHost=127.0.0.1")
	w("StoragePort=%d", MariaDBPort)
	w("StorageUser=slurm")
	w("StoragePass=%s", pass)
	w("StorageLoc=%s", AcctDB)
	return b.String()
}

// defaultMaxJobCount is slurmctld's MaxJobCount when slurm.conf names none.
const defaultMaxJobCount = 10000

// MaxJobCountOf reads MaxJobCount from a slurm.conf's text (Slurm's
// default when it names none).
func MaxJobCountOf(conf string) int {
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "MaxJobCount") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			return n
		}
	}
	return defaultMaxJobCount
}

// QueueShrinks says whether a new slurm.conf holds fewer jobs than the
// old one did. slurmctld then starts with more saved jobs than it may
// hold (a 50,000-job scale run before a 1,000-node one): the new queue is
// full before the first test's job, so the lab starts it empty. An old
// text of "" (no lab yet) never shrinks.
func QueueShrinks(oldConf, newConf string) bool {
	return oldConf != "" && MaxJobCountOf(newConf) < MaxJobCountOf(oldConf)
}
