package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NodeSet runs one slurmd pod on every Node it selects, so each of those
// Nodes is also a Slurm node. It drains a Slurm node before it takes the pod
// away (Node no longer selected, new template, NodeSet deleted) and deletes
// the pod only when no job runs there.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nss,categories=onepool
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredNodes`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyPods`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedPods`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.slurm.idle`
// +kubebuilder:printcolumn:name="Alloc",type=integer,JSONPath=`.status.slurm.allocated`
// +kubebuilder:printcolumn:name="Drained",type=integer,JSONPath=`.status.slurm.drained`
// +kubebuilder:printcolumn:name="Down",type=integer,JSONPath=`.status.slurm.down`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeSetSpec   `json:"spec"`
	Status NodeSetStatus `json:"status,omitempty"`
}

// NodeSetSpec says which Nodes run slurmd and how.
type NodeSetSpec struct {
	// NodeSelector: a Node must carry all these labels. Empty selects every
	// Node the affinity and tolerations allow.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity narrows the Nodes further; only its required node-affinity
	// terms decide where slurmd runs.
	// +optional
	Affinity *corev1.NodeAffinity `json:"affinity,omitempty"`

	// Tolerations let slurmd run on tainted Nodes. A Node with a NoSchedule
	// or NoExecute taint they do not tolerate gets no slurmd pod. Cordoned
	// Nodes keep theirs: a cordon drains the Slurm node instead.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Template is the slurmd pod. Its container named "slurmd" (or its
	// first container) gets ONEPOOL_SLURM_NODE_NAME and
	// ONEPOOL_SLURM_FEATURES for the node agent.
	Template corev1.PodTemplateSpec `json:"template"`

	// Slurm is what the NodeSet's nodes are in Slurm.
	// +optional
	Slurm SlurmNodeSpec `json:"slurm,omitempty"`

	// UpdateStrategy says how pods are replaced when the template changes.
	// +optional
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitempty"`

	// DrainTimeout is how long a drained node may keep running jobs before
	// the NodeSet reports it as stuck (condition Progressing=False, reason
	// DrainTimeout, and a warning event). Jobs are never killed: the pod
	// stays until Slurm says the node is free. Default 24h.
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
}

// SlurmNodeSpec is the Slurm side of the NodeSet's nodes.
type SlurmNodeSpec struct {
	// Features are the dynamic nodes' Slurm features. Slurm puts a dynamic
	// node into the partitions whose NodeSets name one of its features
	// (slurm.conf: NodeSet=h100 Feature=h100, PartitionName=gpu Nodes=h100).
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.-]+$`
	Features []string `json:"features,omitempty"`

	// FeatureLabels are Node label keys whose values each node also
	// registers as Slurm features, after Features: with
	// nvidia.com/gpu.product, a node labelled NVIDIA-H100-80GB-HBM3 can be
	// asked for with `sbatch --constraint=NVIDIA-H100-80GB-HBM3`, the same
	// GPU a pod picks with a nodeSelector on that label. A Node without the
	// label (or with an empty value) adds nothing. When a label's value
	// changes (or appears, as GPU feature discovery labels a new Node a
	// little after it joins), the node's features are set in Slurm: no
	// drain, no new pod.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=317
	FeatureLabels []string `json:"featureLabels,omitempty"`

	// Partitions the NodeSet's nodes are expected in. onepool does not
	// change Slurm's partitions; a node that registers outside one of them
	// makes the condition SlurmPartitions False.
	// +optional
	// +listType=set
	Partitions []string `json:"partitions,omitempty"`
}

// UpdateStrategyType is how pods are replaced on a template change.
// +kubebuilder:validation:Enum=RollingUpdate;OnDelete
type UpdateStrategyType string

const (
	// RollingUpdate drains and replaces out-of-date pods, at most
	// MaxUnavailable Nodes at a time, each only once no job runs there.
	RollingUpdate UpdateStrategyType = "RollingUpdate"
	// OnDelete replaces a pod only after someone deletes it.
	OnDelete UpdateStrategyType = "OnDelete"
)

// UpdateStrategy of a NodeSet.
type UpdateStrategy struct {
	// Type is RollingUpdate (default) or OnDelete.
	// +optional
	// +kubebuilder:default=RollingUpdate
	Type UpdateStrategyType `json:"type,omitempty"`

	// RollingUpdate tunes the RollingUpdate strategy.
	// +optional
	RollingUpdate *RollingUpdateStrategy `json:"rollingUpdate,omitempty"`
}

// RollingUpdateStrategy tunes a rolling update.
type RollingUpdateStrategy struct {
	// MaxUnavailable is how many of the NodeSet's Nodes may be out of
	// service at once during an update (draining, or waiting for their new
	// pod): a number or a percentage of the desired Nodes, rounded up.
	// Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// NodeSetStatus is what the controller last saw, on both sides.
type NodeSetStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// DesiredNodes is the number of Nodes the NodeSet selects (feasible).
	DesiredNodes int32 `json:"desiredNodes"`
	// Pods is the number of slurmd pods, including ones being replaced.
	Pods int32 `json:"pods"`
	// ReadyPods is the number of slurmd pods that are Ready.
	ReadyPods int32 `json:"readyPods"`
	// UpdatedPods is the number of pods made from the current template.
	UpdatedPods int32 `json:"updatedPods"`

	// TemplateHash identifies the current template; pods carry it in the
	// label onepool.dev/template-hash.
	// +optional
	TemplateHash string `json:"templateHash,omitempty"`

	// Slurm counts the NodeSet's nodes by their Slurm state.
	// +optional
	Slurm SlurmCounts `json:"slurm,omitempty"`

	// Conditions: Ready, Progressing, SlurmSynced, SlurmPartitions.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SlurmCounts are the NodeSet's nodes by Slurm state, as sinfo shows them.
// A drained node counts as drained whatever its base state, and a DOWN or
// not-responding node as down.
type SlurmCounts struct {
	// Idle: IDLE and not drained.
	Idle int32 `json:"idle"`
	// Allocated: ALLOCATED, MIXED or COMPLETING, and not drained.
	Allocated int32 `json:"allocated"`
	// Drained: the DRAIN flag is set (draining or drained).
	Drained int32 `json:"drained"`
	// Down: DOWN or NOT_RESPONDING, and not drained.
	Down int32 `json:"down"`
	// Missing: selected Nodes Slurm does not know (yet).
	Missing int32 `json:"missing"`
	// Known is false while Slurm's state is unknown (slurmrestd down or
	// the cache stale); the counts are then from the last known state.
	Known bool `json:"known"`
}

// NodeSetList is a list of NodeSets.
//
// +kubebuilder:object:root=true
type NodeSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeSet `json:"items"`
}
