package keys

// Who writes, and where things appear: the words the Docs share.
const (
	bySyncer    = "the syncer (onepool-controller-manager)"
	byNodeSet   = "the NodeSet controller (onepool-controller-manager)"
	byScheduler = "onepool-scheduler"
	byAgent     = "the node agent (onepool-node-agent, in the slurmd pod)"
	byWebhook   = "the GPU webhook (onepool-controller-manager)"
	byTopology  = "the topology controller (onepool-controller-manager)"
	byTenancy   = "the TenantPolicy status controller (onepool-controller-manager)"
	byOperator  = "you (the cluster operator)"
	byAuthor    = "the pod's author (its template)"

	onNode       = "Node"
	onNodeOrPod  = "Node (the slurmd pod when its Node is gone)"
	onSlurmdPod  = "slurmd pod"
	onPod        = "onepool pod (schedulerName: onepool)"
	onNodeSet    = "NodeSet"
	onNamespace  = "Namespace"
	onOwnPod     = "the component's own pod (controller manager or scheduler)"
	slurmNodeCmd = "`scontrol show node <node>` (State=, Reason= [user@time]) and `sinfo -R` show the node as Slurm sees it."
	notWritten   = "Not written by this version of onepool: the name is reserved in keys, and no code records it."
)

// Docs says what each name in this package means, in the order the
// troubleshooting page lists them (within each Kind).
var Docs = []Doc{
	// Event reasons: the syncer, on the Node.
	{Name: "EventDrained", Value: EventDrained, Kind: KindEvent, Type: "Normal", On: onNodeOrPod, By: bySyncer,
		Means: "The syncer drained the Slurm node behind this Node, with the reason in the message: the Node is cordoned " +
			"(`onepool: node cordoned`), its slurmd pod is being deleted, or the pod has not been Ready for longer than " +
			"`--not-ready-grace` (chart `controllerManager.notReadyGrace`, 2m). Running jobs go on; Slurm starts no new job " +
			"there. The Node's condition `SlurmUnavailable` says `DrainedByOnepool` before the event is recorded.",
		Do: "Nothing, if the cause is meant. The syncer resumes its own drain when the cause goes (`kubectl uncordon`, the " +
			"slurmd pod Ready again). Resume through Kubernetes, not with `scontrol update state=resume`: the syncer would drain " +
			"again (`SlurmNodeRedrained`)."},
	{Name: "EventResumed", Value: EventResumed, Kind: KindEvent, Type: "Normal", On: "Node (syncer), NodeSet (NodeSet controller)", By: bySyncer + "; " + byNodeSet,
		Means: "onepool resumed a drain it made and recorded: the syncer once the cause is gone (uncordoned, the slurmd pod " +
			"Ready); the NodeSet controller once the node's current slurmd pod is Ready and slurmd registered after it started " +
			"(a rolling update's drain that a slurmctld restart brought back, a Node that matches the NodeSet again)."},
	{Name: "EventRedrained", Value: EventRedrained, Kind: KindEvent, Type: "Warning", On: onNodeOrPod, By: bySyncer,
		Means: "The Slurm node was resumed in Slurm (`scontrol update nodename=<node> state=resume`) while onepool's cause " +
			"still holds (the Node cordoned, the slurmd pod deleted or not Ready): the syncer drained it again with its reason.",
		Do: "Take the cause away on the Kubernetes side: `kubectl uncordon <node>`, or get the slurmd pod Ready. A cordoned " +
			"Node's Slurm node stays drained."},
	{Name: "EventDrainFailed", Value: EventDrainFailed, Kind: KindEvent, Type: "Warning", On: onNodeOrPod, By: bySyncer,
		Means: "The drain request to slurmrestd failed (the message has the error). The syncer wrote its record first and " +
			"retries with a backoff; until the drain is in, Slurm may still start jobs on the node. A deleted slurmd pod is held " +
			"by its finalizer meanwhile.",
		Do: "Check that slurmrestd answers the controller manager and accepts its token (`SlurmTokenRefused` events, metric " +
			"`onepool_slurmrest_requests_total`), and that Slurm has the node (`scontrol show node <node>`)."},
	{Name: "EventResumeFailed", Value: EventResumeFailed, Kind: KindEvent, Type: "Warning", On: onNodeOrPod, By: bySyncer,
		Means: "The resume request to slurmrestd failed (the message has the error); the node stays drained and the syncer " +
			"retries with a backoff.",
		Do: "As for `SlurmDrainFailed`: slurmrestd reachable, the token accepted, the node known to Slurm."},
	{Name: "EventSlurmUnavailable", Value: EventSlurmUnavailable, Kind: KindEvent, Type: "Warning", On: "Node; slurmd pod", By: bySyncer,
		Means: "On a Node: Slurm holds the node out for a cause onepool did not make: drained by someone else (an admin, or " +
			"Slurm itself: `Kill task failed`, `Prolog error`), DOWN or NOT_RESPONDING. Recorded when the condition " +
			"`SlurmUnavailable` turns True; the message has its reason and Slurm's text, and the annotations " +
			"`slurm.onepool.dev/reason`, `reason-since`, `reason-set-by` and `state` on the Node and its slurmd pod say the same. " +
			"On a slurmd pod: Slurm has no node of the pod's Slurm node name `--register-grace` (2m) after the pod was made: " +
			"slurmd has not registered; onepool changes nothing.",
		Do: slurmNodeCmd + " onepool never resumes or rewrites such a drain: whoever drained it resumes it " +
			"(`scontrol update nodename=<node> state=resume`) once the cause is fixed. DOWN or NOT_RESPONDING: read the slurmd " +
			"pod's log (`kubectl logs`), check munge and the network between slurmd and slurmctld. Never registered: the slurmd " +
			"container's log says why slurmctld refused it or could not be reached."},
	{Name: "EventSlurmAvailable", Value: EventSlurmAvailable, Kind: KindEvent, Type: "Normal", On: onNode, By: bySyncer,
		Means: "The Node's condition `SlurmUnavailable` turned False: Slurm may place jobs on the node again."},
	{Name: "EventBadAnnotation", Value: EventBadAnnotation, Kind: KindEvent, Type: "Warning", On: onNode, By: bySyncer,
		Means: "The cordon words in `onepool.dev/cordon-reason` had control characters (made spaces) or were over 200 bytes " +
			"(cut on a UTF-8 boundary, ending `…`). The drain went ahead with the changed words, which the message quotes.",
		Do: "Shorten or clean the annotation if the Slurm reason should read otherwise: the syncer drains again with the new " +
			"words."},
	{Name: "EventSlurmNodeShared", Value: EventSlurmNodeShared, Kind: KindEvent, Type: "Warning", On: onNode, By: bySyncer,
		Means: "Two Nodes the `--host-slurmd-nodes` selector matches (or one and a slurmd pod's Node) name the same Slurm " +
			"node: the syncer cannot tell whose cordon speaks for it and acts on neither host Node.",
		Do: "Give each Node its own Slurm node: fix `onepool.dev/slurm-node-name` on one of them, or take " +
			"`" + LabelSlurmdOnHost + "` off the Node that has no slurmd."},
	{Name: "EventAdminDrainKept", Value: EventAdminDrainKept, Kind: KindEvent, Type: "Normal", On: onNode, By: bySyncer,
		Means: "The Node is cordoned, but its Slurm node is already drained by someone else (an admin; also the node agent's " +
			"GPU health drain or the NodeSet's drain): onepool leaves that drain and its reason alone and makes none of its own.",
		Do: "Nothing. If that drain is resumed while the Node is still cordoned, the syncer drains with its own reason " +
			"(`SlurmNodeDrained`); uncordoning leaves the other drain in place."},

	// Event reasons: the scheduler, on the pod.
	{Name: "EventJobSubmitted", Value: EventJobSubmitted, Kind: KindEvent, Type: "Normal", On: onPod + "; each pod of a gang", By: byScheduler,
		Means: "The scheduler asked Slurm for the pod's placeholder job: the message has the job id and says whether Slurm " +
			"granted it at once (an allocation) or it waits in Slurm's queue. The id goes on the pod as `slurm.onepool.dev/job-id`.",
		Do: "While the pod waits: `squeue -j <id>` or `scontrol show job <id>` (Reason=), and the pod's PodScheduled message " +
			"(`kubectl describe pod`)."},
	{Name: "EventJobRejected", Value: EventJobRejected, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "Slurm refused the placeholder job; the message has Slurm's error (`Invalid qos specification`, `Requested " +
			"node configuration is not available`, ...). The pod stays Pending. The scheduler asks again when the pod changes, " +
			"and otherwise after 10 s, 20 s, 40 s, ... up to 5 minutes (a node may register, an admin may fix the QOS).",
		Do: "Fix what Slurm names: the partition, QOS, account or time limit (pod annotations `slurm.onepool.dev/*`, the " +
			"TenantPolicy's defaults, the scheduler's defaults), the Slurm user's association (`sacctmgr show assoc " +
			"user=<user>`), or a size no node has (GPUs, CPUs, memory)."},
	{Name: "EventInvalidRequest", Value: EventInvalidRequest, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "The scheduler cannot turn the pod into a Slurm job: a bad `slurm.onepool.dev/*` annotation (not a Slurm name, " +
			"a time limit under 1m or over `maxTimeLimit`, an unknown exclusive mode), or a GPU request it cannot place (a " +
			"resource claim other than `onepool-gpus`, GPUs asked twice). One event per distinct error; the pod stays Pending " +
			"with `invalid Slurm request: ...` and nothing is asked of Slurm. (A pod whose namespace the scheduler has not seen yet " +
			"gets no event: it waits with `waiting: namespace ... is not in the scheduler's cache yet` and is placed again " +
			"when the namespace arrives, and at least every 30 s.)",
		Do: "Fix the pod (its template) as the message says; the pod is looked at again when its annotations change."},
	{Name: "EventPolicyRefused", Value: EventPolicyRefused, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "The namespace's TenantPolicy does not allow what the pod asks (partition, QOS, account, exclusive mode, GPUs " +
			"per pod), or no TenantPolicy covers the namespace, or two do. Nothing reaches Slurm; the pod stays Pending with " +
			"`refused: ...` in its PodScheduled condition.",
		Do: "Ask within the policy (`kubectl get tenantpolicy <name> -o yaml`), or have the cluster admin widen it, cover the " +
			"namespace (`scheduler.defaultTenantPolicy` for a one-team install), or make two policies disjoint (their `Ready` " +
			"condition says `Conflict`)."},
	{Name: "EventNoNodeFits", Value: EventNoNodeFits, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "Every Node fails the pod's node constraints (kube-scheduler's NodeUnschedulable, NodeName, TaintToleration and " +
			"NodeAffinity filters; for a pod with a GPU claim, a Node that publishes no `gpu.onepool.dev` devices), so no job is " +
			"asked of Slurm. The message counts the filters' reasons per node; one event per distinct reason.",
		Do: "Make a Node fit (label it, untaint, uncordon, get the node agent's DRA driver running there) or change the pod's " +
			"constraints; a Node or ResourceSlice change places the pod again."},
	{Name: "EventJobMisplaced", Value: EventJobMisplaced, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "Slurm started the pod's job on a node the pod cannot use (the Node was labelled, tainted or cordoned after the " +
			"job was asked): the job is cancelled and a new one asked, leaving that Slurm node out while the pod waits.",
		Do: "Nothing, once. Repeated: the Nodes' labels or taints keep changing under the pod's constraints."},
	{Name: "EventTimeLimit", Value: EventTimeLimit, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "A replica (a pod of a Deployment, StatefulSet or LeaderWorkerSet) was bound under a job time limit it did not " +
			"ask for (the partition's MaxTime, the QOS's, the scheduler's `defaultTimeLimit`). When the job ends the replica is " +
			"evicted and its successor waits in Slurm's queue again; the message says when.",
		Do: "Set `slurm.onepool.dev/time-limit` on the pod template (`UNLIMITED` where the partition and QOS allow it), or " +
			"serve from a partition without a MaxTime."},
	{Name: "EventJobEnded", Value: EventJobEnded, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "The pod's placeholder job ended in Slurm (cancelled, timed out, failed, node failure, preempted); the message " +
			"has the state. The pod is evicted (Eviction API, its grace period) and never bound again.",
		Do: "`sacct -j <id>` says why (State, Reason): a `scancel`, the time limit (see `SlurmTimeLimit`), a node failure. " +
			"The pod's controller makes a new pod, which waits for a new job."},
	{Name: "EventJobMissing", Value: EventJobMissing, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "Slurm no longer knows the pod's job (purged, slurmctld lost its state, or `slurm.onepool.dev/job-id` names a " +
			"job that is gone): the pod is evicted.",
		Do: "`sacct -j <id>`; if slurmctld restarted, check that its StateSaveLocation survives restarts."},
	{Name: "EventJobPreempted", Value: EventJobPreempted, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "Slurm began preempting the pod's job for a job it ranks higher (QOS or partition preemption); the job stays " +
			"RUNNING through the QOS GraceTime. The pod is evicted at once with its termination grace cut to end 2 s before " +
			"Slurm's deadline; once it is gone the job is cancelled and the preemptor gets the GPUs.",
		Do: "Expected under preemption. To protect a workload, give its pods a QOS that is not preempted " +
			"(`slurm.onepool.dev/qos`; `sacctmgr show qos format=name,preempt,preemptmode,gracetime`)."},
	{Name: "EventEvictFailed", Value: EventEvictFailed, Kind: KindEvent, On: onPod,
		Means: notWritten + " A PodDisruptionBudget's refusal gives `DisruptionBudgetOverridden`; other eviction errors are retried."},
	{Name: "EventBudgetOverridden", Value: EventBudgetOverridden, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "A PodDisruptionBudget refused the eviction of a pod whose job Slurm ended or is preempting. The pod gets the " +
			"condition `DisruptionTarget` (reason `PreemptionByScheduler`) and is deleted anyway, with the eviction's grace: " +
			"Slurm has given its GPUs to another job (at once, or at the end of the QOS GraceTime).",
		Do: "Budgets do not hold Slurm back: protect serving with a QOS Slurm does not preempt. A Job's `podFailurePolicy` " +
			"with `onPodConditions: [{type: DisruptionTarget}]` and `action: Ignore` keeps such pods off its `backoffLimit`."},
	{Name: "EventGPUsAllocated", Value: EventGPUsAllocated, Kind: KindEvent, Type: "Normal", On: onPod, By: byScheduler,
		Means: "The pod's GPU claim (`onepool-gpus`) holds the devices of the GRES indices Slurm gave its job on that node; the " +
			"pod is bound next.",
		Do: "To compare: `scontrol show job -d <id>` (IDX) and `kubectl get resourceclaim <claim> -o yaml`."},
	{Name: "EventGPUClaimFailed", Value: EventGPUClaimFailed, Kind: KindEvent, Type: "Warning", On: onPod, By: byScheduler,
		Means: "The scheduler could not allocate the pod's GPU claim from Slurm's answer, so the pod is not bound: the node " +
			"publishes no ResourceSlice of `gpu.onepool.dev`, or no device with a GRES index Slurm gave (a GPU gone, a stale " +
			"slice), a device is held by another claim in use, or the claim asks another count or class.",
		Do: "Check the node agent's DRA container on that node (its log; `kubectl get resourceslices`) and compare its devices' " +
			"`gresIndex` with `scontrol show job -d <id>`. A new or changed ResourceSlice makes the pod try again; meanwhile its " +
			"job holds the GPUs in Slurm (it is not given back): delete the pod to free them."},
	{Name: "EventGPUClaimRefused", Value: EventGPUClaimRefused, Kind: KindEvent, Type: "Warning",
		On: "the pod the claim is reserved for (else the ResourceClaim)", By: byAgent + ", its DRA driver",
		Means: "The kubelet asked the node agent to prepare a claim whose GPUs are not the ones Slurm gave the claim's job on " +
			"this node, or a claim that names no job (`slurm.onepool.dev/job-id`: onepool's scheduler did not allocate it). The " +
			"container does not start.",
		Do: "Only onepool's scheduler allocates `gpu.onepool.dev` claims: do not write them by hand. Compare the claim with " +
			"`scontrol show job -d <id>`. (When Slurm cannot be asked, the kubelet retries and there is no event.)"},

	// Event reasons: the NodeSet controller, on the NodeSet.
	{Name: "EventPodCreated", Value: EventPodCreated, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "The NodeSet made a slurmd pod on a Node it selects."},
	{Name: "EventPodCreateFailed", Value: EventPodCreateFailed, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "Creating a slurmd pod failed; the message has the API server's error. The controller retries.",
		Do: "A `Forbidden` from the onepool chart's pod policy: label the namespace `onepool.dev/nodesets=true`. Otherwise " +
			"fix what the error names (quota, an admission webhook, the pod template)."},
	{Name: "EventPodDeleted", Value: EventPodDeleted, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "The NodeSet deleted a slurmd pod; the message says why: no job runs on its drained Slurm node (a rolling " +
			"update, the Node left the NodeSet), the pod failed, a second slurmd pod on one Node; or it force-deleted a pod " +
			"whose Node is gone once Slurm runs nothing there."},
	{Name: "EventPodFailed", Value: EventPodFailed, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "A slurmd pod failed (phase Failed: evicted by the kubelet, refused at admission); it is replaced after a " +
			"backoff that grows with each failure, as a DaemonSet's pod is.",
		Do: "The message has the pod's reason; `kubectl describe node` for pressure evictions, `kubectl logs --previous` for " +
			"the node agent."},
	{Name: "EventNodeDraining", Value: EventNodeDraining, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "The NodeSet drained a Slurm node to take its pod away (`onepool: nodeset update`, `onepool: node left nodeset " +
			"<name>`); the pod goes once no job runs there.",
		Do: "Wait for the jobs (`squeue -w <node>`); past the NodeSet's `drainTimeout` it says `DrainTimeout`."},
	{Name: "EventNodeBusy", Value: EventNodeBusy, Kind: KindEvent, On: onNodeSet,
		Means: notWritten + " A drained node that still runs jobs shows in the NodeSet's `Progressing` condition instead."},
	{Name: "EventDrainTimeout", Value: EventDrainTimeout, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "A Slurm node the NodeSet drained still runs jobs after the NodeSet's `drainTimeout` (default 24h); its pod " +
			"stays until they end, and the condition `Progressing` is False with reason `DrainTimeout`. onepool never kills jobs.",
		Do: "Let the jobs finish, or end them in Slurm (`squeue -w <node>`, then `scontrol requeue <job>` or `scancel <job>`); " +
			"raise `spec.drainTimeout` where jobs run longer."},
	{Name: "EventSlurmNodeRemoved", Value: EventSlurmNodeRemoved, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "The NodeSet deleted the dynamic Slurm node's record (`DELETE /node`), drained and free, its pod gone: the Node " +
			"left the NodeSet, or a rolling update replaced its pod (the new pod's slurmd registers the node afresh, with the " +
			"new template's CPUs, memory, GRES and features)."},
	{Name: "EventFeaturesSet", Value: EventFeaturesSet, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "A Node's values of the NodeSet's `slurm.featureLabels` changed or appeared: the NodeSet set the Slurm node's " +
			"available and active features to match. No drain, no new pod; running jobs stay."},
	{Name: "EventMIGConfigSet", Value: EventMIGConfigSet, Kind: KindEvent, Type: "Normal", On: onNodeSet, By: byNodeSet,
		Means: "A node that asks another MIG layout (`onepool.dev/mig-config`) is drained, runs no job and has no slurmd pod: " +
			"the NodeSet wrote the layout into `nvidia.com/mig.config` for NVIDIA's mig-manager. Its new slurmd pod is made " +
			"when `nvidia.com/mig.config.state` says `success`."},
	{Name: "EventMIGConfigFailed", Value: EventMIGConfigFailed, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "mig-manager says `failed` for the layout the NodeSet handed over: the node stays drained, with no slurmd pod. " +
			"No job is affected.",
		Do: "Read mig-manager's log on the node; ask a layout that works (`kubectl label node <node> onepool.dev/mig-config=" +
			"<layout> --overwrite`): the NodeSet hands it over again."},
	{Name: "EventSlurmNodeKept", Value: EventSlurmNodeKept, Kind: KindEvent, On: onNodeSet,
		Means: notWritten + " The NodeSet leaves a drain it did not make alone without an event."},
	{Name: "EventSlurmActFailed", Value: EventSlurmActFailed, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "A request to slurmrestd failed: a drain, resume, features update or node removal (the message says which, " +
			"and the error). The controller retries.",
		Do: "Check that slurmrestd answers and accepts the token; " + slurmNodeCmd},
	{Name: "EventNoRoomForSlurm", Value: EventNoRoomForSlurm, Kind: KindEvent, Type: "Warning", On: onNodeSet, By: byNodeSet,
		Means: "The Node's pods that onepool did not place (DaemonSets, system pods, other schedulers' pods, slurmd's own pod) " +
			"request so much that less than one whole CPU or one MiB is left for Slurm: no slurmd pod is made there. Tried again.",
		Do: "Leave Slurm room (taint GPU Nodes against other schedulers, shrink DaemonSet requests), or set a static count: " +
			"`ONEPOOL_SLURM_CPUS` and `ONEPOOL_SLURM_REAL_MEMORY_MB` on the template's slurmd container (slurm chart " +
			"`nodeSets[].slurmCPUs`, `slurmRealMemoryMB`)."},
	{Name: "EventShareOvercommitted", Value: EventShareOvercommitted, Kind: KindEvent, Type: "Warning", On: onSlurmdPod, By: byNodeSet,
		Means: "Counted again (every `--nodeset-share-check`, 1m), the Node's pods that onepool did not place now request more " +
			"than was left when the slurmd pod was made (`onepool.dev/slurm-share`): Slurm and the kubelet may give out the " +
			"same CPUs or memory. Nothing is changed: Slurm cannot change a dynamic node's CPUs while jobs run.",
		Do: "Move or shrink the other pods. The count is made again only when a NodeSet template change replaces the pod (the " +
			"Slurm node's record is registered afresh); a pod deleted by hand keeps the old count."},

	// Event reasons: the Slurm credential, on the component's own pod.
	{Name: "EventSlurmTokenExpiring", Value: EventSlurmTokenExpiring, Kind: KindEvent, Type: "Warning", On: onOwnPod, By: "the controller manager, the scheduler",
		Means: "The slurmrestd token from `slurm.tokenSecret` expires within a day, or has expired (every Slurm request then " +
			"fails). At most hourly; tokens onepool mints from the JWT key renew themselves and raise none.",
		Do: "Put a new token in the Secret (read without a restart), or give onepool the JWT key (`slurm.jwtKeySecret`) so it " +
			"mints its own. Metric: `onepool_slurmrest_token_expiry_timestamp_seconds`."},
	{Name: "EventSlurmTokenRefused", Value: EventSlurmTokenRefused, Kind: KindEvent, Type: "Warning", On: onOwnPod, By: "the controller manager, the scheduler",
		Means: "slurmrestd refused onepool's token (HTTP 401 or 511): expired, signed with another key, or for a user Slurm " +
			"does not know. At most hourly. Slurm requests fail meanwhile; once the component's Slurm cache is stale nothing is " +
			"drained, resumed, submitted, cancelled or evicted.",
		Do: "Check that the JWT key in onepool's Secret is the `jwt_hs256.key` slurmctld and slurmrestd use, that " +
			"`slurm.tokenUser` exists in Slurm, and `AuthAltTypes=auth/jwt`. Metric: `onepool_slurmrest_token_refused_total`."},

	// Event reasons: the topology controller, on the Node.
	{Name: "EventTopologyLabelMissing", Value: EventTopologyLabelMissing, Kind: KindEvent, Type: "Warning", On: onNode, By: byTopology,
		Means: "A label of `--topology-levels` (chart `topology.levels`) is missing or empty on the Node: its Slurm node is in " +
			"the switch `unlabeled` of topology.conf until it is set. It still runs jobs.",
		Do: "Label the Node with each level's label."},
	{Name: "EventTopologyLabelConflict", Value: EventTopologyLabelConflict, Kind: KindEvent, Type: "Warning", On: onNode, By: byTopology,
		Means: "The Node's level labels contradict other nodes' (a switch under two parents, one value at two levels, a value " +
			"named `root` or `unlabeled`): its Slurm node is in the switch `unlabeled`; the first node in name order keeps the path.",
		Do: "Fix the labels so each switch name has one level and one parent; the message names the clash."},

	// Node condition.
	{Name: "ConditionSlurmUnavailable", Value: ConditionSlurmUnavailable, Kind: KindNodeCondition, On: onNode, By: bySyncer,
		Means: "True while Slurm holds the node out: drained, DOWN or NOT_RESPONDING; the reason says whose cause, the " +
			"message Slurm's reason text. False (`SlurmAvailable`) once Slurm may place jobs there again. A Node that never " +
			"had it True has none.",
		Do: "`kubectl get node <node> -o jsonpath='{.status.conditions[?(@.type==\"SlurmUnavailable\")]}'`; see its reason."},
	{Name: "ConditionReasonDrained", Value: ConditionReasonDrained, Kind: KindNodeConditionReason, On: onNode, By: bySyncer,
		Means: "`SlurmUnavailable=True`: drained in Slurm by someone other than onepool (an admin, Slurm itself). Slurm's " +
			"reason, time and user are mirrored into the `slurm.onepool.dev/*` annotations.",
		Do: "onepool never resumes or rewrites it: whoever drained it resumes it. " + slurmNodeCmd},
	{Name: "ConditionReasonDown", Value: ConditionReasonDown, Kind: KindNodeConditionReason, On: onNode, By: bySyncer,
		Means: "`SlurmUnavailable=True`: the Slurm node is DOWN (and not drained by onepool).",
		Do: slurmNodeCmd + " Check the slurmd pod (`kubectl logs`), munge and the network; a node Slurm set DOWN comes back " +
			"when slurmd registers again if `ReturnToService` allows, else by `scontrol update nodename=<node> state=resume`."},
	{Name: "ConditionReasonNotResponding", Value: ConditionReasonNotResponding, Kind: KindNodeConditionReason, On: onNode, By: bySyncer,
		Means: "`SlurmUnavailable=True`: slurmd does not answer slurmctld (NOT_RESPONDING).",
		Do:    "Check that the slurmd pod runs and is Ready, and the network between it and slurmctld."},
	{Name: "ConditionReasonAvailable", Value: ConditionReasonAvailable, Kind: KindNodeConditionReason, On: onNode, By: bySyncer,
		Means: "`SlurmUnavailable=False`: Slurm may place jobs on the node."},
	{Name: "ConditionReasonDrainedByOwner", Value: ConditionReasonDrainedByOwner, Kind: KindNodeConditionReason, On: onNode, By: bySyncer,
		Means: "`SlurmUnavailable=True`: the drain is onepool's own: the syncer's (cordon, slurmd pod deleted or not ready), " +
			"the NodeSet's (update, node left) or the node agent's GPU health drain. The message is Slurm's reason (`drained by " +
			"onepool` while the syncer's drain goes in). No `slurm.onepool.dev/*` annotations.",
		Do: "See the drain reason in the message: [Slurm drain reasons](#slurm-drain-reasons)."},

	// NodeSet conditions.
	{Name: "NodeSetReady", Value: NodeSetReady, Kind: KindNodeSetCondition, On: onNodeSet, By: byNodeSet,
		Means: "True (`AllReady`) when every selected Node's slurmd pod is Ready and its node is registered and up in Slurm; " +
			"False with `PodsNotReady`, `SlurmStateUnknown` or `SlurmNodesNotReady` otherwise.",
		Do: "`kubectl get nodesets -n <ns>` shows the counts (DESIRED, READY, DRAINED, DOWN); the reason says what lacks."},
	{Name: "NodeSetProgressing", Value: NodeSetProgressing, Kind: KindNodeSetCondition, On: onNodeSet, By: byNodeSet,
		Means: "True (`Working`) while some node has a step to take; the message lists up to five nodes and what each waits " +
			"for. False with `Complete` when every selected Node runs an up-to-date slurmd pod, or with `DrainTimeout`."},
	{Name: "NodeSetSlurmSynced", Value: NodeSetSlurmSynced, Kind: KindNodeSetCondition, On: onNodeSet, By: byNodeSet,
		Means: "True (`SlurmStateKnown`) while Slurm's node states are current; False (`SlurmStateUnknown`) while slurmrestd " +
			"is unreachable or the cache stale: then nothing is drained, deleted or resumed (missing pods are still made)."},
	{Name: "NodeSetSlurmPartitions", Value: NodeSetSlurmPartitions, Kind: KindNodeSetCondition, On: onNodeSet, By: byNodeSet,
		Means: "Only with `spec.slurm.partitions`: whether every registered node is in each of them (`InPartitions`, " +
			"`NotInPartitions`). onepool checks partitions; it does not set them.",
		Do: "A node joins the partitions whose slurm.conf `NodeSet=` line names one of its features: fix slurm.conf's " +
			"`NodeSet=`/`Feature=` and `PartitionName=` lines, or the NodeSet's `slurm.features`."},
	{Name: "NodeSetReasonAllReady", Value: NodeSetReasonAllReady, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Ready=True`: every slurmd pod is Ready and registered in Slurm."},
	{Name: "NodeSetReasonPodsNotReady", Value: NodeSetReasonPodsNotReady, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Ready=False`: fewer slurmd pods are Ready than Nodes are selected (the message counts them).",
		Do: "`kubectl get pods -n <ns> -l onepool.dev/nodeset=<name>`; a pod that is not made: the NodeSet's events " +
			"(`FailedCreate`, `NoRoomForSlurm`)."},
	{Name: "NodeSetReasonSlurmNotReady", Value: NodeSetReasonSlurmNotReady, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Ready=False`: the pods are Ready, but some nodes are not registered in Slurm, or are DOWN or NOT_RESPONDING.",
		Do:    "`sinfo -N`, then the slurmd pods' logs of the missing or down nodes."},
	{Name: "NodeSetReasonSlurmUnknown", Value: NodeSetReasonSlurmUnknown, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`SlurmSynced=False` and `Ready=False`: Slurm's state is unknown (slurmrestd unreachable, the cache stale). The " +
			"status keeps the last known Slurm counts.",
		Do: "Check slurmrestd and the controller manager's token (`SlurmTokenRefused`, readiness of the controller manager)."},
	{Name: "NodeSetReasonSlurmKnown", Value: NodeSetReasonSlurmKnown, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`SlurmSynced=True`: Slurm's node states are current."},
	{Name: "NodeSetReasonComplete", Value: NodeSetReasonComplete, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Progressing=False`: every selected Node runs an up-to-date slurmd pod; nothing to do."},
	{Name: "NodeSetReasonWorking", Value: NodeSetReasonWorking, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Progressing=True`: nodes are being created, drained, replaced or resumed; the message says what each waits for " +
			"(jobs to end, a pod to terminate, Slurm's state, slurmd to register)."},
	{Name: "NodeSetReasonDrainTimeout", Value: NodeSetReasonDrainTimeout, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`Progressing=False`: nodes drained past the NodeSet's `drainTimeout` still run jobs (listed in the message).",
		Do:    "As for the `DrainTimeout` event: let the jobs end, or end them in Slurm."},
	{Name: "NodeSetReasonPartitionsOK", Value: NodeSetReasonPartitionsOK, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`SlurmPartitions=True`: every registered node is in each partition of `spec.slurm.partitions`."},
	{Name: "NodeSetReasonPartitionsWrong", Value: NodeSetReasonPartitionsWrong, Kind: KindNodeSetConditionReason, On: onNodeSet, By: byNodeSet,
		Means: "`SlurmPartitions=False`: the listed nodes are not in every partition of `spec.slurm.partitions`.",
		Do: "Check slurm.conf's `NodeSet=<name> Feature=<feature>` and `PartitionName=... Nodes=<nodeset>` lines against the " +
			"NodeSet's `slurm.features`."},

	// TenantPolicy condition.
	{Name: "TenantPolicyReady", Value: TenantPolicyReady, Kind: KindTenantPolicyCondition, On: "TenantPolicy", By: byTenancy,
		Means: "True (`Covers`, with how many namespaces) unless a namespace it covers is covered by another policy too " +
			"(`Conflict`)."},
	{Name: "TenantPolicyReasonCovers", Value: TenantPolicyReasonCovers, Kind: KindTenantPolicyConditionReason, On: "TenantPolicy", By: byTenancy,
		Means: "`Ready=True`: the message counts the namespaces the policy covers."},
	{Name: "TenantPolicyReasonConflict", Value: TenantPolicyReasonConflict, Kind: KindTenantPolicyConditionReason, On: "TenantPolicy", By: byTenancy,
		Means: "`Ready=False`: the namespaces in the message are covered by this policy and another; their onepool pods are " +
			"refused (`RefusedByTenantPolicy`).",
		Do: "Make the policies' `spec.namespaces` (names and selectors) disjoint."},

	// Annotations a pod's author sets.
	{Name: "AnnotationJobPartition", Value: AnnotationJobPartition, Kind: KindAnnotation, On: onPod, By: byAuthor,
		Means: "The Slurm partition of the pod's placeholder job. Unset: the TenantPolicy's default, else the scheduler's " +
			"`defaultPartition`, else Slurm's default.",
		Do: "A value the policy does not allow: `RefusedByTenantPolicy`; one Slurm does not know: `SlurmJobRejected`."},
	{Name: "AnnotationJobQOS", Value: AnnotationJobQOS, Kind: KindAnnotation, On: onPod, By: byAuthor,
		Means: "The Slurm QOS of the pod's job: its priority, limits and what may preempt it. Unset: the policy's default, " +
			"else `defaultQOS`, else the user's default QOS."},
	{Name: "AnnotationJobAccount", Value: AnnotationJobAccount, Kind: KindAnnotation, On: onPod, By: byAuthor,
		Means: "The Slurm account the pod's job is charged to. Unset: the policy's default, else `defaultAccount`."},
	{Name: "AnnotationGPUs", Value: AnnotationGPUs, Kind: KindAnnotation, On: onPod, By: byWebhook,
		Means: "The pod's GPU count, when its GPUs come through the claim `onepool-gpus` instead of an `nvidia.com/gpu` " +
			"request: the webhook writes it with the claim. The scheduler and the TenantPolicy read it.",
		Do: "Leave it to the webhook: set without the claim, or with `nvidia.com/gpu` too, it is `InvalidSlurmRequest`."},
	{Name: "AnnotationGPURequests", Value: AnnotationGPURequests, Kind: KindAnnotation, On: onPod, By: byWebhook,
		Means: "How the GPU count splits by container, `<container>=<count>,...`: each GPU container gets a request of the " +
			"claim named after it, and its own GPUs."},
	{Name: "AnnotationGPUType", Value: AnnotationGPUType, Kind: KindAnnotation, On: onPod, By: byWebhook,
		Means: "The Slurm GRES type the pod's GPUs must be: the webhook writes the MIG profile of an `nvidia.com/mig-<profile>` " +
			"request (`1g.10gb`), and the pod's job asks `gres/gpu:<type>:<count>`. Absent: any GPU.",
		Do: "A pod whose node has no device of that type waits in Slurm's queue (its Reason says why)."},
	{Name: "AnnotationJobExclusive", Value: AnnotationJobExclusive, Kind: KindAnnotation, On: onPod, By: byAuthor,
		Means: "How the pod's job shares its node: `none` (with Slurm jobs, GPU by GPU), `node` (`--exclusive`) or `user` " +
			"(`--exclusive=user`). Unset: the policy's default, else the scheduler's `defaultExclusive`. Slurm shows it as the " +
			"job's OverSubscribe."},
	{Name: "AnnotationJobTimeLimit", Value: AnnotationJobTimeLimit, Kind: KindAnnotation, On: onPod, By: byAuthor,
		Means: "The job's time limit: a Go duration of at least 1m (`90m`, `12h`) or `UNLIMITED`, capped by `maxTimeLimit`. " +
			"Unset: `defaultTimeLimit`, else the partition's (a replica then gets `SlurmTimeLimit`)."},
	{Name: "AnnotationGang", Value: AnnotationGang, Kind: KindAnnotation, On: "a JobSet replicated job's pod template", By: byAuthor,
		Means: "`replicated-job` makes all pods of the replicated job of one restart attempt one gang: one Slurm job of " +
			"replicas × parallelism nodes, started and preempted together. Without it each pod is placed alone."},
	{Name: "AnnotationJobID", Value: AnnotationJobID, Kind: KindAnnotation, On: onPod + "; its GPU ResourceClaim", By: byScheduler,
		Means: "The Slurm job that holds the pod's place (for a gang, the group's job). On a GPU claim: the job whose GPUs it " +
			"holds; the node agent prepares the claim only if they match. A pod's author can write it too: it is used only for " +
			"a bound pod whose job Slurm no longer lists, never to take another owner's job.",
		Do: "`scontrol show job <id>`, `sacct -j <id>`. Do not edit it."},

	// Annotations onepool writes on slurmd pods and Nodes.
	{Name: "AnnotationSlurmNode", Value: AnnotationSlurmNode, Kind: KindAnnotation, On: onSlurmdPod, By: byNodeSet + "; " + bySyncer,
		Means: "The Slurm node the slurmd pod runs: the Node's name, or its label `onepool.dev/slurm-node-name`."},
	{Name: "AnnotationSlurmShare", Value: AnnotationSlurmShare, Kind: KindAnnotation, On: onSlurmdPod, By: byNodeSet,
		Means: "Slurm's share of the Node when the pod was made, `cpus=<n>,memory-mb=<n>`: its allocatable less what its pods " +
			"that onepool did not place request. slurmd registers with it (`ONEPOOL_SLURM_CPUS`, " +
			"`ONEPOOL_SLURM_REAL_MEMORY_MB`); absent where the template sets a static count.",
		Do: "Compare with `scontrol show node <node>` (CPUTot, RealMemory); see `SlurmShareOvercommitted`."},
	{Name: "AnnotationCordonReason", Value: AnnotationCordonReason, Kind: KindAnnotation, On: onNode, By: byOperator,
		Means: "Your words for a cordon: the syncer drains with `onepool: node cordoned: <words>`, so `sinfo -R` tells Slurm " +
			"users why. Changing them while cordoned drains again with the new words.",
		Do: "`kubectl annotate node <node> onepool.dev/cordon-reason='PSU swap' && kubectl cordon <node>`. Control characters " +
			"and words over 200 bytes are changed (`InvalidAnnotation`)."},
	{Name: "AnnotationDrainApplied", Value: AnnotationDrainApplied, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "The syncer's record of the drain it made: the reason, written just before the drain, with " +
			"`onepool.dev/drain-applied-at`. The syncer resumes only a drain Slurm shows with this reason, set within a minute " +
			"of that time: an admin's drain in the same words stays the admin's.",
		Do: "Never edit or remove it: without its record onepool takes its own drain for an admin's and never resumes it " +
			"(resume it then by hand)."},
	{Name: "AnnotationDrainAppliedAt", Value: AnnotationDrainAppliedAt, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "When the syncer made the drain recorded in `onepool.dev/drain-applied` (RFC 3339).",
		Do:    "As for `onepool.dev/drain-applied`."},
	{Name: "AnnotationDrainReplaced", Value: AnnotationDrainReplaced, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "`<RFC 3339 time> <reason>`: the syncer's drain that a drain with new words replaced (the cordon words changed, " +
			"the pod deleted while cordoned). Until Slurm shows the new words the drain there is still the old one, and still " +
			"onepool's; after, it stays while the drain is in place, since a slurmctld restart before Slurm saved the new " +
			"words brings the old ones back (drained over again).",
		Do: "Leave it; it goes with the drain."},
	{Name: "AnnotationDrainResumed", Value: AnnotationDrainResumed, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "`<RFC 3339 time> <reason>`: the drain the syncer resumed last. slurmctld restarted before saving its state " +
			"brings that drain back with its old reason and time; the record makes it still onepool's to resume.",
		Do: "Leave it; it describes nothing once Slurm shows no such drain."},
	{Name: "AnnotationNodeSetDrain", Value: AnnotationNodeSetDrain, Kind: KindAnnotation, On: onNode, By: byNodeSet,
		Means: "The NodeSet controller's record of its drain (`onepool: nodeset update`, `onepool: node left nodeset <name>`), " +
			"with `onepool.dev/nodeset-drain-applied-at`; kept apart from the syncer's. The NodeSet resumes only a drain it " +
			"recorded; the record stays after the resume (it matches only that drain).",
		Do: "Never edit or remove it while the drain is in place."},
	{Name: "AnnotationNodeSetDrainAt", Value: AnnotationNodeSetDrainAt, Kind: KindAnnotation, On: onNode, By: byNodeSet,
		Means: "When the NodeSet made the drain recorded in `onepool.dev/nodeset-drain-applied` (RFC 3339)."},
	{Name: "AnnotationSlurmReason", Value: AnnotationSlurmReason, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "Slurm's reason text while Slurm holds the node out for a cause onepool did not make (an admin's drain, DOWN, " +
			"NOT_RESPONDING); removed when Slurm gives the node back or the drain is onepool's.",
		Do: "The admin who set it resumes it; see `SlurmNodeUnavailable`."},
	{Name: "AnnotationSlurmSince", Value: AnnotationSlurmSince, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "When Slurm set that reason (RFC 3339), if Slurm says."},
	{Name: "AnnotationSlurmBy", Value: AnnotationSlurmBy, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "The Slurm user who set that reason, if Slurm says (`scontrol show node`'s `[user@time]`)."},
	{Name: "AnnotationSlurmState", Value: AnnotationSlurmState, Kind: KindAnnotation, On: "Node and slurmd pod", By: bySyncer,
		Means: "Slurm's node state, its flags joined by `+` (`IDLE+DRAIN`, `DOWN+NOT_RESPONDING`)."},

	// Labels.
	{Name: "LabelComponent", Value: LabelComponent, Kind: KindLabel, On: onSlurmdPod, By: byNodeSet,
		Means: "`slurmd` on the pods a NodeSet makes; the syncer watches pods with it. It only narrows what the syncer looks " +
			"at: a slurmd pod is one a NodeSet owns (controller owner reference); any other pod with the label is left alone " +
			"(no finalizer, no drain)."},
	{Name: "LabelSlurmdOnHost", Value: LabelSlurmdOnHost, Kind: KindLabel, On: onNode, By: byOperator,
		Means: "This Node's slurmd runs on the host (an existing Slurm cluster), not in a slurmd pod. When the controller " +
			"manager's `--host-slurmd-nodes` selector (chart `controllerManager.hostSlurmd.nodeSelector`) matches the Node, " +
			"the syncer drains its Slurm node (the Node's name, or `onepool.dev/slurm-node-name`) while the Node is cordoned " +
			"and mirrors Slurm's drains and DOWN state onto the Node, as for a slurmd pod's Node. The prefix keeps a kubelet " +
			"from setting it on itself (the NodeRestriction admission plugin).",
		Do: "`kubectl label node NODE " + LabelSlurmdOnHost + "=true`. Removing it stops the syncer; a drain onepool made " +
			"stays until resumed in Slurm."},
	{Name: "LabelSlurmNodeName", Value: LabelSlurmNodeName, Kind: KindLabel, On: onNode, By: byOperator,
		Means: "The Slurm node behind this Node, when the names differ; without it the Slurm node has the Node's name. The " +
			"syncer, the NodeSet and the scheduler all map names through it.",
		Do: "Set it before the Node's slurmd pod is made: the pod's slurmd registers under the name it was given then."},
	{Name: "LabelPodGroup", Value: LabelPodGroup, Kind: KindLabel, On: onPod, By: byAuthor,
		Means: "scheduler-plugins' coscheduling label: the pods that carry a PodGroup's name are one gang, one Slurm job of " +
			"the PodGroup's `minMember` nodes, none bound before the job runs."},
	{Name: "LabelLWSName", Value: LabelLWSName, Kind: KindLabel, On: onPod, By: "the LeaderWorkerSet controller",
		Means: "With `leaderworkerset.sigs.k8s.io/group-index`: a LeaderWorkerSet group (leader and workers) is one gang, one " +
			"Slurm job of `spec.leaderWorkerTemplate.size` nodes."},
	{Name: "LabelLWSGroupIndex", Value: LabelLWSGroupIndex, Kind: KindLabel, On: onPod, By: "the LeaderWorkerSet controller",
		Means: "The group's index within its LeaderWorkerSet (see `leaderworkerset.sigs.k8s.io/name`)."},
	{Name: "LabelJobSetName", Value: LabelJobSetName, Kind: KindLabel, On: onPod, By: "the JobSet controller",
		Means: "The JobSet of the pod; with the replicated job and restart attempt it names the gang of a replicated job that " +
			"asks for one (`slurm.onepool.dev/gang`)."},
	{Name: "LabelJobSetReplicatedJob", Value: LabelJobSetReplicatedJob, Kind: KindLabel, On: onPod, By: "the JobSet controller",
		Means: "The replicated job of the pod, within its JobSet."},
	{Name: "LabelJobSetRestartAttempt", Value: LabelJobSetRestartAttempt, Kind: KindLabel, On: onPod, By: "the JobSet controller",
		Means: "The JobSet's restart attempt: a JobSet restarted after a failure (attempt + 1) is a new gang, a new Slurm job."},
	{Name: "LabelNodeSet", Value: LabelNodeSet, Kind: KindLabel, On: onSlurmdPod, By: byNodeSet,
		Means: "The NodeSet that made the slurmd pod.",
		Do:    "`kubectl get pods -n <ns> -l onepool.dev/nodeset=<name> -o wide` lists a NodeSet's pods and their Nodes."},
	{Name: "LabelNodeSetNamespace", Value: LabelNodeSetNamespace, Kind: KindLabel, On: onNamespace, By: byOperator,
		Means: "`true` lets onepool's controller manager make, delete and change pods in the namespace (the onepool chart's " +
			"ValidatingAdmissionPolicy): the namespaces that hold NodeSets. Elsewhere it may only take its finalizer off a pod.",
		Do: "`kubectl label namespace <ns> onepool.dev/nodesets=true` where NodeSets live; without it their pods fail to be " +
			"made (`FailedCreate`, Forbidden)."},
	{Name: "LabelTemplateHash", Value: LabelTemplateHash, Kind: KindLabel, On: onSlurmdPod, By: byNodeSet,
		Means: "The hash of the NodeSet's pod template the pod was made from; a pod whose hash differs from the NodeSet's " +
			"`status.templateHash` is out of date and is rolled (RollingUpdate)."},
	{Name: "LabelSlurmBusy", Value: LabelSlurmBusy, Kind: KindLabel, On: onSlurmdPod, By: byNodeSet,
		Means: "`true` while Slurm runs jobs on the pod's node (ALLOCATED, MIXED, COMPLETING). The NodeSet's " +
			"PodDisruptionBudget `<nodeset>-busy` (maxUnavailable 0) selects these pods, so `kubectl drain` cannot evict a " +
			"slurmd pod under running jobs.",
		Do: "A `kubectl drain` that waits on it: the cordon has drained the Slurm node; the eviction goes through once the " +
			"node's jobs end (`squeue -w <node>`)."},
	{Name: "LabelMIGConfig", Value: LabelMIGConfig, Kind: KindLabel, On: onNode, By: byOperator,
		Means: "The MIG layout the Node's GPUs are to have: a configuration name of NVIDIA's mig-parted (GPU operator's " +
			"`default-mig-parted-config`: `all-1g.10gb`, `all-balanced`, ...). A NodeSet's node whose layout differs from " +
			"`nvidia.com/mig.config` is drained (`onepool: mig config <layout>`, at most `maxUnavailable` at once); once no " +
			"job runs there its slurmd pod goes, the NodeSet writes the name into `nvidia.com/mig.config` for mig-manager, " +
			"and when `nvidia.com/mig.config.state` says `success` a new slurmd pod registers the node afresh with the new " +
			"MIG devices as typed GRES and DRA devices, and the drain is resumed. A new Node with it gets its layout before " +
			"its first slurmd pod.",
		Do: "`kubectl label node <node> onepool.dev/mig-config=<layout> --overwrite`. While a Node has this label the " +
			"chart's admission policy (`controllerManager.migLayoutPolicy`) refuses anyone but the controller manager a change " +
			"of `nvidia.com/mig.config` (mig-manager would change the GPUs under running jobs); to set it by hand, remove " +
			"this label first. Progress: the NodeSet's `Progressing` condition and events (`MIGConfigSet`, `MIGConfigFailed`)."},
	{Name: "LabelNVIDIAMIGConfig", Value: LabelNVIDIAMIGConfig, Kind: KindLabel, On: onNode, By: byNodeSet,
		Means: "NVIDIA's mig-manager's label: the layout it applies. The NodeSet writes it (with `nvidia.com/mig.config.state=" +
			"pending`) only for a node that asks another layout by `onepool.dev/mig-config`, drained, free, and its slurmd " +
			"pod gone.",
		Do: "On a Node labelled `onepool.dev/mig-config` a change by anyone else is refused (`has its MIG layout kept by " +
			"onepool`): ask the layout by `onepool.dev/mig-config`, or remove that label to take the node out of onepool's " +
			"hands."},
	{Name: "LabelNVIDIAMIGConfigState", Value: LabelNVIDIAMIGConfigState, Kind: KindLabel, On: onNode, By: "NVIDIA's mig-manager (the NodeSet sets `pending` with a new layout)",
		Means: "mig-manager's report: `pending`, `rebooting`, `success`, `failed`. The NodeSet makes the node's new slurmd pod " +
			"only on `success`.",
		Do: "`failed`: the node stays drained with no slurmd pod (event `MIGConfigFailed`); read mig-manager's log, then " +
			"ask a layout that works (`onepool.dev/mig-config`)."},
	{Name: "LabelGPUClaims", Value: LabelGPUClaims, Kind: KindLabel, On: onNamespace, By: byOperator,
		Means: "`disabled` keeps the namespace's pods out of onepool's GPU webhook (the chart's namespaceSelector): they ask " +
			"`nvidia.com/gpu` of a device plugin, which chooses GPUs apart from Slurm."},

	// Values.
	{Name: "ComponentSlurmd", Value: ComponentSlurmd, Kind: KindValue, On: "label `onepool.dev/component`", By: byNodeSet,
		Means: "The value of `onepool.dev/component` on slurmd pods."},
	{Name: "GangReplicatedJob", Value: GangReplicatedJob, Kind: KindValue, On: "annotation `slurm.onepool.dev/gang`", By: byAuthor,
		Means: "The one value of `slurm.onepool.dev/gang`: the replicated job's pods of one attempt are one gang."},
	{Name: "GPUClaimsDisabled", Value: GPUClaimsDisabled, Kind: KindValue, On: "label `onepool.dev/gpu-claims`", By: byOperator,
		Means: "The value of `onepool.dev/gpu-claims` that keeps a namespace out of the GPU webhook."},
	{Name: "MIGConfigPending", Value: MIGConfigPending, Kind: KindValue, On: "label `nvidia.com/mig.config.state`", By: byNodeSet + ", NVIDIA's mig-manager",
		Means: "The layout in `nvidia.com/mig.config` is not applied yet. The NodeSet writes it with a new layout, so that an " +
			"old `success` is never read as the new layout's."},
	{Name: "MIGConfigSuccess", Value: MIGConfigSuccess, Kind: KindValue, On: "label `nvidia.com/mig.config.state`", By: "NVIDIA's mig-manager",
		Means: "mig-manager applied the layout in `nvidia.com/mig.config`: the NodeSet makes the node's slurmd pod."},
	{Name: "MIGConfigFailed", Value: MIGConfigFailed, Kind: KindValue, On: "label `nvidia.com/mig.config.state`", By: "NVIDIA's mig-manager",
		Means: "mig-manager could not apply the layout: the node stays drained without a slurmd pod (event `MIGConfigFailed`)."},

	// Finalizers.
	{Name: "FinalizerSlurmdPod", Value: FinalizerSlurmdPod, Kind: KindFinalizer, On: onSlurmdPod, By: bySyncer,
		Means: "Holds a deleted slurmd pod until its Slurm node is drained (`onepool: slurmd pod deleted`) or Slurm has no " +
			"such node, so a deleted pod never leaves Slurm placing jobs there. The syncer takes it off a pod no NodeSet owns.",
		Do: "A pod stuck Terminating with it: Slurm's state is unknown, or the drain fails (`SlurmDrainFailed`); fix " +
			"slurmrestd. Removing it by hand leaves Slurm placing jobs on a node whose slurmd is going."},
	{Name: "FinalizerNodeSet", Value: FinalizerNodeSet, Kind: KindFinalizer, On: onNodeSet, By: byNodeSet,
		Means: "Holds a deleted NodeSet until each of its Slurm nodes is drained and free, its pods are gone and their Slurm " +
			"node records removed. No job is killed.",
		Do: "A NodeSet stuck deleting waits for jobs (`Progressing`, `DrainTimeout`) or for Slurm's state to be known " +
			"(`SlurmSynced`)."},

	// Event actions.
	{Name: "ActionDrain", Value: ActionDrain, Kind: KindAction, By: bySyncer + ", " + byNodeSet,
		Means: "A Slurm node drained (or a drain failed, kept or timed out)."},
	{Name: "ActionResume", Value: ActionResume, Kind: KindAction, By: bySyncer + ", " + byNodeSet,
		Means: "A Slurm node resumed (or the resume failed)."},
	{Name: "ActionMirror", Value: ActionMirror, Kind: KindAction, By: bySyncer,
		Means: "Slurm's view written onto the Node (the condition `SlurmUnavailable` changed)."},
	{Name: "ActionCreatePod", Value: ActionCreatePod, Kind: KindAction, By: byNodeSet,
		Means: "A slurmd pod made, or not made."},
	{Name: "ActionDeletePod", Value: ActionDeletePod, Kind: KindAction, By: byNodeSet + ", " + byScheduler,
		Means: "A pod deleted: a slurmd pod, or an onepool pod whose eviction a PodDisruptionBudget refused."},
	{Name: "ActionReplacePod", Value: ActionReplacePod, Kind: KindAction, By: byNodeSet,
		Means: "A failed slurmd pod replaced."},
	{Name: "ActionRemoveSlurmNode", Value: ActionRemoveSlurmNode, Kind: KindAction, By: byNodeSet,
		Means: "A dynamic Slurm node's record deleted."},
	{Name: "ActionSetFeatures", Value: ActionSetFeatures, Kind: KindAction, By: byNodeSet,
		Means: "A Slurm node's features set from its Node's labels."},
	{Name: "ActionSetMIGConfig", Value: ActionSetMIGConfig, Kind: KindAction, By: byNodeSet,
		Means: "A node's MIG layout handed to NVIDIA's mig-manager, or its failure reported."},
	{Name: "ActionSync", Value: ActionSync, Kind: KindAction, By: bySyncer + ", " + byNodeSet + ", " + byTopology,
		Means: "A check of one side against the other: Slurm has no node for a slurmd pod, a share overcommitted, a topology " +
			"label problem."},
	{Name: "ActionSchedule", Value: ActionSchedule, Kind: KindAction, By: byScheduler,
		Means: "A scheduling decision about the pod: refused, invalid, misplaced, a time limit it did not ask for."},
	{Name: "ActionSubmit", Value: ActionSubmit, Kind: KindAction, By: byScheduler,
		Means: "The pod's placeholder job asked of Slurm (submitted, rejected, or not asked: no node fits)."},
	{Name: "ActionBind", Value: ActionBind, Kind: KindAction, By: byScheduler,
		Means: "The pod's GPU claim allocated, or not, before binding."},
	{Name: "ActionEvict", Value: ActionEvict, Kind: KindAction, By: byScheduler,
		Means: "The pod evicted because its job ended, went missing or is being preempted."},
	{Name: "ActionAuthenticate", Value: ActionAuthenticate, Kind: KindAction, By: "the controller manager, the scheduler",
		Means: "A problem with the component's slurmrestd token."},

	// Environment variables of the slurmd container.
	{Name: "EnvSlurmNodeName", Value: EnvSlurmNodeName, Kind: KindEnv, On: "slurmd pod's node agent containers", By: byNodeSet,
		Means: "The Slurm node name the agent registers (`slurmd -Z -N`) and its DRA driver checks claims against."},
	{Name: "EnvSlurmFeatures", Value: EnvSlurmFeatures, Kind: KindEnv, On: "slurmd pod's node agent containers", By: byNodeSet,
		Means: "The node's Slurm features, comma-separated: the NodeSet's `slurm.features`, then its `featureLabels` values."},
	{Name: "EnvKubeNodeName", Value: EnvKubeNodeName, Kind: KindEnv, On: "slurmd pod's node agent containers", By: byNodeSet,
		Means: "The Kubernetes Node the pod runs on: the pool of the DRA driver's ResourceSlice."},
	{Name: "EnvSlurmCPUs", Value: EnvSlurmCPUs, Kind: KindEnv, On: "slurmd container", By: byNodeSet + " (or the template, a static count)",
		Means: "The CPUs slurmd registers with (`CPUs=`): Slurm's share of the Node, unless the template sets it."},
	{Name: "EnvSlurmRealMemoryMB", Value: EnvSlurmRealMemoryMB, Kind: KindEnv, On: "slurmd container", By: byNodeSet + " (or the template, a static count)",
		Means: "The memory slurmd registers with, in MiB (`RealMemory=`): Slurm's share of the Node, unless the template sets it."},

	// DRA.
	{Name: "GPUDriverName", Value: GPUDriverName, Kind: KindDRA, On: "ResourceSlice", By: byAgent,
		Means: "The DRA driver the node agent serves: one ResourceSlice per Node (pool = the Node's name), a device " +
			"`gpu-<minor>` per GPU, `gpu-<minor>-mig-<gi>-<ci>` per MIG device of a partitioned GPU.",
		Do: "`kubectl get resourceslices -o wide`: a GPU Node without one gets no onepool pod with a GPU claim."},
	{Name: "GPUAttrGresIndex", Value: GPUAttrGresIndex, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "Slurm's GRES index of the GPU on its node (the `IDX` of `scontrol show job -d`): the scheduler allocates claims " +
			"by it. gres.conf and the slice come from one ordering, so it is not assumed to be the minor."},
	{Name: "GPUAttrUUID", Value: GPUAttrUUID, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "The GPU's UUID, as NVML reports it."},
	{Name: "GPUAttrMinor", Value: GPUAttrMinor, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "The GPU's `/dev/nvidia<minor>` number."},
	{Name: "GPUAttrProductName", Value: GPUAttrProductName, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "NVML's product name (`NVIDIA H100 80GB HBM3`)."},
	{Name: "GPUAttrGresType", Value: GPUAttrGresType, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "The Slurm GRES type of the GPU (`nvidia_h100_80gb_hbm3`), as in gres.conf; a MIG device's is its profile (`1g.10gb`)."},
	{Name: "GPUAttrParentUUID", Value: GPUAttrParentUUID, Kind: KindDRA, On: "ResourceSlice device attribute", By: byAgent,
		Means: "Set on MIG devices only (`gpu-<minor>-mig-<gi>-<ci>`): the UUID of the GPU they partition. Its `uuid` is the MIG " +
			"device's own, its `minor` and `productName` the GPU's."},
	{Name: "GPUCapacityMemory", Value: GPUCapacityMemory, Kind: KindDRA, On: "ResourceSlice device capacity", By: byAgent,
		Means: "The GPU's memory, a quantity."},
	{Name: "GPUCounterMemory", Value: GPUCounterMemory, Kind: KindDRA, On: "ResourceSlice shared counter", By: byAgent,
		Means: "Where the API server serves partitionable devices (Kubernetes 1.36): a partitioned GPU is a counter set named " +
			"after it (`gpu-<minor>`, in a slice of counters only) whose `memory` counter is the GPU's whole memory; each of its MIG " +
			"devices consumes its own memory from it (compute instances of one GPU instance an equal part of it). Not published " +
			"where the API server drops the fields (1.35)."},
	{Name: "GPUDeviceClass", Value: GPUDeviceClass, Kind: KindDRA, On: "DeviceClass", By: "the onepool chart",
		Means: "The DeviceClass that selects the driver's devices; onepool's GPU claims ask it."},
	{Name: "PodClaimGPUs", Value: PodClaimGPUs, Kind: KindDRA, On: "pod `spec.resourceClaims`", By: byWebhook + "; " + byScheduler,
		Means: "The name of the claim the scheduler allocates from the GPUs Slurm gave the pod's job. The webhook names it " +
			"(turning `nvidia.com/gpu` requests into it); the scheduler makes the claim, owned by the pod. A onepool pod with " +
			"any other claim is refused."},

	// The scheduler's name.
	{Name: "SchedulerName", Value: SchedulerName, Kind: KindSchedulerName, On: "pod `spec.schedulerName`", By: byAuthor,
		Means: "A pod that sets it is placed by Slurm through onepool-scheduler, its GPUs through the webhook."},

	// Placeholder jobs.
	{Name: "PlaceholderCommentPrefix", Value: PlaceholderCommentPrefix, Kind: KindPlaceholder, On: "Slurm job comment", By: byScheduler,
		Form: "onepool:pod=<ns>/<name>;uid=<uid>;user=<slurm user>;sig=<hmac>",
		Means: "How every placeholder job's comment starts (`pod=`, `group=`, `lws=`, `jobset=` owners). Only the signature " +
			"makes a job onepool's: a copied or forged comment is not adopted, bound to or cancelled.",
		Do: "`squeue -o '%.8i %.10q %.8T %.12N %k'` shows the comments."},
	{Name: "ReleasePath", Value: ReleasePath, Kind: KindPlaceholder, On: "the scheduler's release endpoint", By: byScheduler,
		Form: "/v1/placeholders/<job id>",
		Means: "What a placeholder's script and the release epilog ask (`GET <releaseURL>/v1/placeholders/<job id>`) until it " +
			"answers 200 (the job's pods are gone); 409 while a pod exists, 404 for an unknown job.",
		Do: "Slurm nodes must reach `releaseURL` (chart `scheduler.release.url`); otherwise a placeholder holds its GPUs " +
			"until KillWait or GraceTime."},
	{Name: "PlaceholderKeyData", Value: PlaceholderKeyData, Kind: KindPlaceholder, On: "the scheduler's placeholder key Secret", By: byScheduler,
		Means: "The Secret data key of the signing key (32 random bytes); the first scheduler replica makes it."},
	{Name: "PlaceholderKeyPrevious", Value: PlaceholderKeyPrevious, Kind: KindPlaceholder, On: "the scheduler's placeholder key Secret", By: byOperator,
		Means: "The previous signing key, still accepted while you rotate.",
		Do:    "Rotate: copy `key` to `previous`, write a new `key`, restart the scheduler."},
}
