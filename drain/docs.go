package drain

import "github.com/onepool/onepool/keys"

const (
	onReason  = "Slurm node's reason (`sinfo -R`, `scontrol show node <node>`)"
	bySyncer  = "the syncer (onepool-controller-manager)"
	byNodeSet = "the NodeSet controller (onepool-controller-manager)"
	byAgent   = "the node agent's `health` command (slurm.conf `HealthCheckProgram`)"
	// notOnWords: the words alone prove nothing.
	notOnWords = " onepool owns such a drain only by its record (the Node's annotations), never by the words alone: an " +
		"admin's drain in the same words stays the admin's."
)

// Docs says what each drain reason onepool writes into Slurm means, and
// what to do, for docs/troubleshooting.md (see keys.Doc).
var Docs = []keys.Doc{
	{Name: "Prefix", Value: Prefix, Kind: keys.KindDrainReason, Form: "onepool: ...", On: onReason, By: "every part of onepool that drains",
		Means: "How every drain reason onepool writes starts. A reason that starts so is not necessarily onepool's: anyone " +
			"may type it. Slurm may append its own cause, as in `onepool: node cordoned : Not responding` (a cordoned node " +
			"rebooting): still onepool's drain.",
		Do: "The Node's condition `SlurmUnavailable` says whose drain it is: `DrainedByOnepool`, or `SlurmDrained` for " +
			"anyone else's."},
	{Name: "ReasonCordoned", Value: ReasonCordoned, Kind: keys.KindDrainReason, Form: "onepool: node cordoned[: <your words>]", On: onReason, By: bySyncer,
		Means: "The Node is cordoned (`kubectl cordon`, `kubectl drain`, anything that sets `spec.unschedulable`). The words " +
			"after `: ` are the Node's annotation `onepool.dev/cordon-reason`." + notOnWords,
		Do: "For Slurm users: the node is in Kubernetes maintenance; ask who cordoned it (the words say why). To give the node " +
			"back: `kubectl uncordon <node>`, and the syncer resumes it. `scontrol update state=resume` while cordoned is " +
			"drained again (`SlurmNodeRedrained`)."},
	{Name: "ReasonPodDeleted", Value: ReasonPodDeleted, Kind: keys.KindDrainReason, On: onReason, By: bySyncer,
		Means: "The node's slurmd pod is being deleted; its finalizer holds the pod until this drain is in. When the NodeSet's " +
			"new slurmd pod on the Node is Ready (and the Node not cordoned), the syncer resumes the drain.",
		Do: "If it stays: `kubectl get pods -n <ns> -l onepool.dev/nodeset=<name> -o wide` — is there a new pod on that Node, " +
			"and is it Ready? The NodeSet's events say why not."},
	{Name: "ReasonPodNotReady", Value: ReasonPodNotReady, Kind: keys.KindDrainReason, On: onReason, By: bySyncer,
		Means: "The node's slurmd pod has not been Ready for longer than `--not-ready-grace` (chart " +
			"`controllerManager.notReadyGrace`, 2m). Resumed by the syncer when the pod is Ready again.",
		Do: "`kubectl describe pod` and `kubectl logs` of the slurmd pod (its slurmd and node agent containers); the kubelet " +
			"and the Node's own conditions."},
	{Name: "ReasonNodeSetUpdate", Value: ReasonNodeSetUpdate, Kind: keys.KindDrainReason, On: onReason, By: byNodeSet,
		Means: "A rolling update (the NodeSet's template or `slurm.features` changed) replaces the node's slurmd pod: at most " +
			"`maxUnavailable` nodes at once, idle ones first. Once no job runs there the pod is deleted, the Slurm node record " +
			"removed, and the new pod's slurmd registers it afresh, not drained." + notOnWords,
		Do: "Wait for the node's jobs (`squeue -w <node>`); past `drainTimeout` the NodeSet says `DrainTimeout`. onepool never " +
			"kills jobs: end or requeue them to go faster."},
	{Name: "ReasonNodeSetLeft", Value: ReasonNodeSetLeft, Kind: keys.KindDrainReason, Form: "onepool: node left nodeset <name>", On: onReason, By: byNodeSet,
		Means: "The Node no longer matches the NodeSet `<name>` (its labels or taints changed, the Node or the NodeSet was " +
			"deleted): once no job runs there its slurmd pod is deleted and the Slurm node record removed. If the Node matches " +
			"again first, the NodeSet resumes the drain once the pod is Ready and registered." + notOnWords,
		Do: "Meant: wait for the jobs. Not meant: fix the Node's labels (or the NodeSet's selector) so it matches again."},
	{Name: "ReasonMIGConfig", Value: ReasonMIGConfig, Kind: keys.KindDrainReason, Form: "onepool: mig config <layout>", On: onReason, By: byNodeSet,
		Means: "The Node asks another MIG layout (its label `onepool.dev/mig-config`): like a rolling update, at most " +
			"`maxUnavailable` nodes at once. Once no job runs there the slurmd pod is deleted, the layout handed to NVIDIA's " +
			"mig-manager (`nvidia.com/mig.config`), and when it says `success` the Slurm node record is removed and a new pod's " +
			"slurmd registers the node afresh with the new MIG devices; then the drain is resumed." + notOnWords,
		Do: "Wait for the node's jobs (`squeue -w <node>`). If it stays drained with no slurmd pod: `kubectl get node <node> " +
			"-L nvidia.com/mig.config,nvidia.com/mig.config.state` (the NodeSet's `Progressing` condition says what it waits " +
			"for); `failed`: see mig-manager's log, fix the layout or ask another."},
	{Name: "ReasonGPUPrefix", Value: ReasonGPUPrefix, Kind: keys.KindDrainReason, Form: "onepool: gpu <check>: <detail>", On: onReason, By: byAgent,
		Means: "A GPU health check failed on the node: `nvml` (no driver, a GPU lost, a hung call), `count` (fewer GPUs than " +
			"expected), `xid` (a fatal XID since slurmd started), `ecc`, `retired pages`, `row remap`, `temperature`. " +
			"onepool never resumes it, and shows it as its own (`DrainedByOnepool`); the node agent's README lists each check.",
		Do: "Fix the GPU, then `scontrol update nodename=<node> state=resume`. An XID is remembered until slurmd restarts: " +
			"delete the slurmd pod (the NodeSet makes a new one) before resuming, or the next health check drains again."},
	{Name: "TruncatedMark", Value: TruncatedMark, Kind: keys.KindDrainReason, Form: "onepool: node cordoned: <words>…", On: onReason, By: bySyncer,
		Means: "Ends cordon words cut to 200 bytes (`MaxOperatorReason`); an `InvalidAnnotation` event on the Node says so. " +
			"(GPU health reasons are cut to 199 bytes and end with `...`.)"},
}
