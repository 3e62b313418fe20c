// Package keys is onepool's registry of names: every label, annotation,
// finalizer, condition type and event reason that onepool reads or writes
// on Kubernetes objects is declared here, and only here. It holds names,
// and (docs.go) a table of what each name means and what to do about it,
// from which docs/troubleshooting.md is generated; no logic. The drain
// reasons onepool writes into Slurm, and what its drain records mean, are
// package drain's (their table too).
package keys

// Labels.
const (
	// LabelComponent marks onepool's pods; LabelComponent=ComponentSlurmd
	// selects the slurmd pods the syncer watches.
	LabelComponent  = "onepool.dev/component"
	ComponentSlurmd = "slurmd"

	// LabelSlurmNodeName on a Node names its Slurm node when the two names
	// differ. Without it the Slurm node has the Node's name.
	LabelSlurmNodeName = "onepool.dev/slurm-node-name"

	// LabelSlurmdOnHost marks a Node whose slurmd runs on the host (an
	// existing Slurm cluster, systemd), not in a slurmd pod. The controller
	// manager's --host-slurmd-nodes selector (chart
	// controllerManager.hostSlurmd.nodeSelector) names the Nodes it acts
	// on; this label, under node-restriction.kubernetes.io/ so that a
	// kubelet cannot set it on itself (NodeRestriction), is the one the
	// docs use.
	LabelSlurmdOnHost = "node-restriction.kubernetes.io/onepool-slurmd-on-host"

	// LabelPodGroup is scheduler-plugins' coscheduling label: pods that
	// carry it with a PodGroup's name form one gang, placed as one Slurm job.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"

	// LabelLWSName and LabelLWSGroupIndex are LeaderWorkerSet's labels on
	// every pod of a group (its leader and workers): the LeaderWorkerSet's
	// name and the group's index. One group is one gang, placed as one
	// Slurm job, its size the LeaderWorkerSet's spec.leaderWorkerTemplate.size.
	LabelLWSName       = "leaderworkerset.sigs.k8s.io/name"
	LabelLWSGroupIndex = "leaderworkerset.sigs.k8s.io/group-index"

	// JobSet's labels on its pods: the JobSet, the replicated job and the
	// restart attempt (a JobSet restarted after a failure makes its Jobs
	// again, attempt + 1). See AnnotationGang.
	LabelJobSetName           = "jobset.sigs.k8s.io/jobset-name"
	LabelJobSetReplicatedJob  = "jobset.sigs.k8s.io/replicatedjob-name"
	LabelJobSetRestartAttempt = "jobset.sigs.k8s.io/restart-attempt"

	// LabelNodeSet on a slurmd pod names the NodeSet that made it.
	LabelNodeSet = "onepool.dev/nodeset"
	// LabelNodeSetNamespace "true" on a Namespace lets onepool's controller
	// manager make, delete and change pods there: the namespaces that hold
	// NodeSets (the onepool chart's ValidatingAdmissionPolicy; elsewhere it
	// only takes its finalizer off a pod).
	LabelNodeSetNamespace = "onepool.dev/nodesets"
	// LabelTemplateHash on a slurmd pod is the hash of the NodeSet's pod
	// template it was made from; a pod whose hash differs is out of date.
	LabelTemplateHash = "onepool.dev/template-hash"
	// LabelSlurmBusy is "true" on a slurmd pod while Slurm runs jobs on its
	// node (ALLOCATED, MIXED or COMPLETING). The NodeSet's
	// PodDisruptionBudget selects these pods with maxUnavailable 0.
	LabelSlurmBusy = "onepool.dev/slurm-busy"
	// LabelMIGConfig on a Node asks a MIG layout: a name of NVIDIA
	// mig-parted's configuration (`all-1g.10gb`, `all-balanced`). The
	// NodeSet drains the node, waits for its jobs, deletes its slurmd pod,
	// then writes the name into LabelNVIDIAMIGConfig for NVIDIA's
	// mig-manager; once that says MIGConfigSuccess, a new slurmd pod
	// registers the node with the new MIG devices.
	LabelMIGConfig = "onepool.dev/mig-config"
	// LabelNVIDIAMIGConfig is the layout NVIDIA's mig-manager applies
	// (GPU operator); LabelNVIDIAMIGConfigState its report: pending,
	// rebooting, success or failed.
	LabelNVIDIAMIGConfig      = "nvidia.com/mig.config"
	LabelNVIDIAMIGConfigState = "nvidia.com/mig.config.state"
	MIGConfigPending          = "pending"
	MIGConfigSuccess          = "success"
	MIGConfigFailed           = "failed"
	// LabelGPUClaims=GPUClaimsDisabled on a Namespace keeps its pods out of
	// onepool's GPU webhook (the onepool chart's namespaceSelector): they
	// keep asking nvidia.com/gpu of a device plugin.
	LabelGPUClaims    = "onepool.dev/gpu-claims"
	GPUClaimsDisabled = "disabled"
)

// Environment variables the NodeSet controller sets on the slurmd container
// and the node agent reads.
const (
	EnvSlurmNodeName = "ONEPOOL_SLURM_NODE_NAME"
	EnvSlurmFeatures = "ONEPOOL_SLURM_FEATURES" // comma-separated
	// EnvKubeNodeName is the Kubernetes Node the pod runs on (the DRA
	// driver's pool); the Slurm node name may differ (a label overrides it).
	EnvKubeNodeName = "ONEPOOL_KUBE_NODE_NAME"
	// EnvSlurmCPUs and EnvSlurmRealMemoryMB are what the node registers
	// with in Slurm (CPUs=, RealMemory= in MiB). The NodeSet controller sets
	// them to Slurm's share of the Node (AnnotationSlurmShare) unless the
	// template's slurmd container sets them itself (a static count).
	EnvSlurmCPUs         = "ONEPOOL_SLURM_CPUS"
	EnvSlurmRealMemoryMB = "ONEPOOL_SLURM_REAL_MEMORY_MB"
)

// GPUs as DRA devices: the node agent publishes them in ResourceSlices of
// this driver, one pool per Kubernetes node (named after the node), and the
// scheduler allocates claims from them by Slurm's GRES indices.
const (
	// GPUDriverName is the DRA driver the node agent serves.
	GPUDriverName = "gpu.onepool.dev"
	// GPU device attributes (in the driver's domain).
	GPUAttrGresIndex   = "gresIndex"   // int: Slurm's GRES index of the device on its node
	GPUAttrUUID        = "uuid"        // string: NVML's UUID
	GPUAttrMinor       = "minor"       // int: the /dev/nvidia<minor> number
	GPUAttrProductName = "productName" // string: NVML's product name
	GPUAttrGresType    = "type"        // string: the Slurm GRES type (h100, a100_80gb_pcie, ...)
	GPUAttrParentUUID  = "parentUUID"  // string, MIG devices only: the partitioned GPU's UUID
	// GPUCapacityMemory is the device's memory, a quantity.
	GPUCapacityMemory = "memory"
	// GPUCounterMemory is the counter of a partitioned GPU's counter set
	// (partitionable devices): the GPU's memory, which its MIG devices consume.
	GPUCounterMemory = "memory"
	// GPUDeviceClass is the DeviceClass of those devices (the charts
	// install it; it selects the driver's devices).
	GPUDeviceClass = "gpu.onepool.dev"
	// PodClaimGPUs is the name, in a pod's spec.resourceClaims, of the claim
	// onepool allocates from the GPUs Slurm gave the pod's job.
	PodClaimGPUs = "onepool-gpus"
)

// SchedulerName is the schedulerName a pod sets to be placed by Slurm.
const SchedulerName = "onepool"

// Pod annotations the scheduler reads: what the pod's placeholder job asks
// of Slurm. Unset: the scheduler's configured defaults.
const (
	AnnotationJobPartition = "slurm.onepool.dev/partition"
	AnnotationJobQOS       = "slurm.onepool.dev/qos"
	AnnotationJobAccount   = "slurm.onepool.dev/account"
	// AnnotationGPUs is the GPU count of a pod whose GPUs come through its
	// onepool GPU claim (PodClaimGPUs) instead of an nvidia.com/gpu
	// request; onepool's webhook writes it when it makes the claim.
	AnnotationGPUs = "slurm.onepool.dev/gpus"
	// AnnotationGPURequests splits that count by container: the requests
	// of the claim onepool makes, "<container>=<count>,..." (each GPU
	// container uses the request named after it, and gets its own GPUs).
	AnnotationGPURequests = "slurm.onepool.dev/gpu-requests"
	// AnnotationGPUType is the Slurm GRES type those GPUs must be: the
	// MIG profile of nvidia.com/mig-<profile> (1g.10gb). Absent: any GPU.
	AnnotationGPUType = "slurm.onepool.dev/gpu-type"
	// AnnotationJobExclusive is how the pod's job shares its node: "none"
	// (with Slurm jobs, GPU by GPU), "node" (--exclusive) or "user"
	// (--exclusive=user). Unset: the scheduler's defaultExclusive.
	AnnotationJobExclusive = "slurm.onepool.dev/exclusive"
	// AnnotationJobTimeLimit is a Go duration ("90m", "12h") or "UNLIMITED".
	AnnotationJobTimeLimit = "slurm.onepool.dev/time-limit"
	// AnnotationGang=GangReplicatedJob on a JobSet replicated job's pod
	// template makes all its pods of one restart attempt (replicas ×
	// parallelism, read from the JobSet) one gang, one Slurm job. JobSet
	// has no gang field of its own; a pod without it is placed alone.
	AnnotationGang    = "slurm.onepool.dev/gang"
	GangReplicatedJob = "replicated-job"

	// AnnotationJobID is written by the scheduler: the Slurm job that holds
	// the pod's place (for a gang: the group's job).
	AnnotationJobID = "slurm.onepool.dev/job-id"
)

// Annotations.
const (
	// AnnotationSlurmNode on a slurmd pod records the Slurm node it runs.
	AnnotationSlurmNode = "onepool.dev/slurm-node"

	// AnnotationSlurmShare on a slurmd pod is Slurm's share of its Node as
	// the NodeSet counted it when it made the pod, "cpus=<n>,memory-mb=<n>":
	// the Node's allocatable less what its pods that onepool did not place
	// request (slurmd's own pod among them). The node registers with it.
	AnnotationSlurmShare = "onepool.dev/slurm-share"

	// AnnotationCordonReason on a Node: the operator's words for a cordon.
	// They follow onepool's cordon reason in the Slurm drain reason
	// (drain.CordonReason).
	AnnotationCordonReason = "onepool.dev/cordon-reason"

	// AnnotationDrainApplied and AnnotationDrainAppliedAt are onepool's
	// record of a drain it made: the reason, and when (RFC 3339), written
	// just before the drain. They live on the slurmd pod's Node, so a
	// replaced slurmd pod finds them; on the pod itself when the Node is
	// gone. The syncer resumes a drained node only when Slurm shows this
	// reason, set at this time: an admin's drain with the same words is
	// still the admin's. Seeing the record while Slurm shows the node
	// resumed means someone resumed it under a cause that still holds.
	AnnotationDrainApplied   = "onepool.dev/drain-applied"
	AnnotationDrainAppliedAt = "onepool.dev/drain-applied-at"

	// AnnotationDrainReplaced keeps, beside the syncer's record, the record
	// of its drain that a drain with new words replaces (the cordon's words
	// changed; the pod deleted while cordoned), as "<RFC 3339 time>
	// <reason>". Until Slurm shows the new words the drain in Slurm is still
	// the old one, and still onepool's: a drain request that failed, or
	// whose answer was lost, leaves it so. Once Slurm shows the new words it
	// stays while they are in place: a slurmctld restart before Slurm saved
	// them brings the old words back, which are then drained over again.
	AnnotationDrainReplaced = "onepool.dev/drain-replaced"

	// AnnotationDrainResumed is the syncer's record of the drain it resumed
	// last, as "<RFC 3339 time> <reason>": slurmctld restarted before saving
	// its state brings that drain back, with its old reason and time, and
	// it is still onepool's to resume.
	AnnotationDrainResumed = "onepool.dev/drain-resumed"

	// AnnotationNodeSetDrain and AnnotationNodeSetDrainAt on a Node are the
	// NodeSet controller's record of a drain it made (nodeset update, node
	// left nodeset), kept apart from the syncer's: it resumes only a drain
	// it recorded. The record stays after the resume (it matches only that
	// drain): slurmctld restarted before saving its state brings the drain
	// back, and the NodeSet resumes it again.
	AnnotationNodeSetDrain   = "onepool.dev/nodeset-drain-applied"
	AnnotationNodeSetDrainAt = "onepool.dev/nodeset-drain-applied-at"

	// Slurm's view, mirrored onto the slurmd pod and its Node while Slurm
	// holds the node out for a cause onepool did not make (an admin's
	// drain, DOWN, NOT_RESPONDING). Removed when Slurm gives it back.
	AnnotationSlurmReason = "slurm.onepool.dev/reason"
	AnnotationSlurmSince  = "slurm.onepool.dev/reason-since" // RFC 3339
	AnnotationSlurmBy     = "slurm.onepool.dev/reason-set-by"
	AnnotationSlurmState  = "slurm.onepool.dev/state" // e.g. "IDLE+DRAIN"
)

// NodeDrainAnnotations are the annotations onepool keeps on a Node about
// drains: the operator's cordon words, the syncer's and the NodeSet's
// drain records, and Slurm's view mirrored there. With no drain in Slurm
// and the Node uncordoned they describe nothing; a test lab starting a
// stage clean removes them.
func NodeDrainAnnotations() []string {
	return []string{
		AnnotationCordonReason,
		AnnotationDrainApplied, AnnotationDrainAppliedAt, AnnotationDrainReplaced, AnnotationDrainResumed,
		AnnotationNodeSetDrain, AnnotationNodeSetDrainAt,
		AnnotationSlurmReason, AnnotationSlurmSince, AnnotationSlurmBy, AnnotationSlurmState,
	}
}

// Finalizers.
const (
	// FinalizerSlurmdPod holds a slurmd pod's deletion until its Slurm node
	// is drained, so a deleted pod never leaves Slurm placing jobs there.
	FinalizerSlurmdPod = "onepool.dev/drain-on-delete"
)

// FinalizerNodeSet holds a NodeSet's deletion until every one of its Slurm
// nodes is drained and free and its pods are gone.
const FinalizerNodeSet = "onepool.dev/nodeset-drain"

// NodeSet conditions (metav1.Condition types) and their reasons.
const (
	NodeSetReady           = "Ready"
	NodeSetProgressing     = "Progressing"
	NodeSetSlurmSynced     = "SlurmSynced"
	NodeSetSlurmPartitions = "SlurmPartitions"

	NodeSetReasonAllReady        = "AllReady"
	NodeSetReasonPodsNotReady    = "PodsNotReady"
	NodeSetReasonSlurmNotReady   = "SlurmNodesNotReady"
	NodeSetReasonSlurmUnknown    = "SlurmStateUnknown"
	NodeSetReasonSlurmKnown      = "SlurmStateKnown"
	NodeSetReasonComplete        = "Complete"
	NodeSetReasonWorking         = "Working"
	NodeSetReasonDrainTimeout    = "DrainTimeout"
	NodeSetReasonPartitionsOK    = "InPartitions"
	NodeSetReasonPartitionsWrong = "NotInPartitions"
)

// TenantPolicy conditions (metav1.Condition types) and their reasons.
const (
	TenantPolicyReady          = "Ready"
	TenantPolicyReasonCovers   = "Covers"
	TenantPolicyReasonConflict = "Conflict"
)

// Node conditions.
const (
	// ConditionSlurmUnavailable is True while Slurm holds the node out:
	// drained, DOWN or NOT_RESPONDING. Its reason is one of the
	// ConditionReason* values and its message Slurm's reason text.
	ConditionSlurmUnavailable = "SlurmUnavailable"

	ConditionReasonDrained        = "SlurmDrained"
	ConditionReasonDown           = "SlurmDown"
	ConditionReasonNotResponding  = "SlurmNotResponding"
	ConditionReasonAvailable      = "SlurmAvailable"
	ConditionReasonDrainedByOwner = "DrainedByOnepool"
)

// Event reasons.
const (
	EventDrained          = "SlurmNodeDrained"
	EventResumed          = "SlurmNodeResumed"
	EventRedrained        = "SlurmNodeRedrained"
	EventDrainFailed      = "SlurmDrainFailed"
	EventResumeFailed     = "SlurmResumeFailed"
	EventSlurmUnavailable = "SlurmNodeUnavailable"
	EventSlurmAvailable   = "SlurmNodeAvailable"
	EventBadAnnotation    = "InvalidAnnotation"
	EventAdminDrainKept   = "AdminDrainKept"
	EventSlurmNodeShared  = "SlurmNodeClaimedTwice" // two host-slurmd Nodes name one Slurm node: neither is acted on

	// Scheduler events, on the pod.
	EventJobSubmitted   = "SlurmJobSubmitted"
	EventJobRejected    = "SlurmJobRejected"      // Slurm refused the placeholder job
	EventInvalidRequest = "InvalidSlurmRequest"   // a pod annotation or request onepool cannot turn into a job
	EventPolicyRefused  = "RefusedByTenantPolicy" // the namespace's TenantPolicy does not allow what the pod asks (or none covers it)
	EventNoNodeFits     = "NoSlurmNodeFits"       // every Slurm node fails the pod's node constraints (selector, affinity, taints, cordon, volumes): nothing is submitted
	EventJobMisplaced   = "SlurmJobMisplaced"     // Slurm started the job on a node the pod cannot use; it is given back and asked again without that node
	EventTimeLimit      = "SlurmTimeLimit"        // a replica (Deployment, StatefulSet, LeaderWorkerSet) was bound under a job time limit it did not ask for
	EventJobEnded       = "SlurmJobEnded"         // the job ended in Slurm; the pod is evicted
	EventJobMissing     = "SlurmJobMissing"       // Slurm no longer knows the job; the pod is evicted
	EventJobPreempted   = "SlurmJobPreempted"     // Slurm began preempting the job; the pod is evicted before its deadline
	EventEvictFailed    = "EvictionFailed"
	// EventBudgetOverridden: a PodDisruptionBudget refused the eviction of a
	// pod whose job Slurm ended or preempts; the pod is deleted anyway.
	EventBudgetOverridden = "DisruptionBudgetOverridden"
	EventGPUsAllocated    = "SlurmGPUsAllocated" // the pod's GPU claim holds the devices of its job's GRES indices
	EventGPUClaimFailed   = "GPUClaimFailed"     // the claim cannot be allocated from Slurm's answer; the pod is not bound
	EventGPUClaimRefused  = "GPUClaimRefused"    // the node agent refused to prepare a claim whose GPUs are not those Slurm gave its job there

	// NodeSet events, on the NodeSet.
	EventPodCreated       = "SuccessfulCreate"
	EventPodCreateFailed  = "FailedCreate"
	EventPodDeleted       = "SuccessfulDelete"
	EventPodFailed        = "FailedDaemonPod" // the slurmd pod failed; it is replaced after a backoff, as a DaemonSet's
	EventNodeDraining     = "DrainingSlurmNode"
	EventNodeBusy         = "WaitingForJobs"
	EventDrainTimeout     = "DrainTimeout"
	EventSlurmNodeRemoved = "SlurmNodeRemoved"
	EventFeaturesSet      = "SlurmNodeFeaturesSet" // a node's features set in Slurm from its Node's FeatureLabels
	EventMIGConfigSet     = "MIGConfigSet"         // a drained, free node's MIG layout handed to NVIDIA's mig-manager
	EventMIGConfigFailed  = "MIGConfigFailed"      // mig-manager says failed: the node stays drained, no slurmd pod
	EventSlurmNodeKept    = "SlurmNodeKept"        // drained by someone else: the record stays
	EventSlurmActFailed   = "SlurmActionFailed"
	// EventNoRoomForSlurm: the Node's other pods leave Slurm no whole CPU or
	// no memory; no slurmd pod is made there until they do.
	EventNoRoomForSlurm = "NoRoomForSlurm"
	// EventShareOvercommitted: pods onepool did not place now request more
	// of the Node than was left when its slurmd pod was made; Slurm and the
	// kubelet may give out the same CPUs or memory until the pod is replaced.
	EventShareOvercommitted = "SlurmShareOvercommitted"

	// Slurm credential events, on the component's own pod.
	EventSlurmTokenExpiring = "SlurmTokenExpiring" // the slurmrestd token expires within a day
	EventSlurmTokenRefused  = "SlurmTokenRefused"  // slurmrestd refused the token

	// Topology events, on the Node: why its Slurm node is in the switch
	// "unlabeled" of topology.conf.
	EventTopologyLabelMissing  = "TopologyLabelMissing"
	EventTopologyLabelConflict = "TopologyLabelConflict"
)

// Event actions (events.k8s.io's action: what was done, or failed, to the
// object the event regards).
const (
	ActionDrain           = "Drain"
	ActionResume          = "Resume"
	ActionMirror          = "Mirror" // Slurm's view written onto the Kubernetes side
	ActionCreatePod       = "CreatePod"
	ActionDeletePod       = "DeletePod"
	ActionReplacePod      = "ReplacePod"
	ActionRemoveSlurmNode = "RemoveSlurmNode"
	ActionSetFeatures     = "SetSlurmNodeFeatures"
	ActionSetMIGConfig    = "SetMIGConfig"
	ActionSync            = "Sync"
	ActionSchedule        = "Schedule"
	ActionSubmit          = "Submit"
	ActionBind            = "Bind"
	ActionEvict           = "Evict"
	ActionAuthenticate    = "Authenticate"
)

// Placeholder jobs. The comment of every job onepool's scheduler makes
// starts with PlaceholderCommentPrefix ("onepool:pod=<ns>/<name>;uid=<uid>;user=<slurm user>;sig=<hmac>"
// or "onepool:group=<ns>/<podgroup>;uid=<uid>;user=<slurm user>;sig=<hmac>"); the signature,
// keyed by the Secret's PlaceholderKeyData (PlaceholderKeyPrevious is still
// accepted), is what makes it onepool's: the prefix alone proves nothing.
// Whatever holds such a job's GPUs after Slurm ended it (the placeholder
// script, the release epilog) asks GET <releaseURL>ReleasePath<job id>
// until it answers 200.
const (
	PlaceholderCommentPrefix = "onepool:"
	ReleasePath              = "/v1/placeholders/"
	PlaceholderKeyData       = "key"
	PlaceholderKeyPrevious   = "previous"
)
