package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantPolicy is the cluster admin's word on what the pods of some
// namespaces (one team) may ask of Slurm through onepool: the Slurm user
// their placeholder jobs run as, and the partitions, QOS, accounts and
// exclusive modes they may name, with a default for each, and caps on
// GPUs. A pod in a namespace no policy covers is refused (unless the
// scheduler names a default policy). Pod annotations choose only within
// the policy; nothing a pod author writes widens it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tp,categories=onepool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Slurm-User",type=string,JSONPath=`.spec.slurmUser`
// +kubebuilder:printcolumn:name="Accounts",type=string,JSONPath=`.spec.accounts.allowed`
// +kubebuilder:printcolumn:name="QOS",type=string,JSONPath=`.spec.qos.allowed`
// +kubebuilder:printcolumn:name="GPUs/Pod",type=integer,JSONPath=`.spec.maxGPUsPerPod`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.maxGPUs`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenantPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TenantPolicySpec   `json:"spec"`
	Status TenantPolicyStatus `json:"status,omitempty"`
}

// TenantPolicySpec says which namespaces the policy covers and what their
// pods may ask.
type TenantPolicySpec struct {
	// Namespaces the policy covers: by name, or by label selector, or both
	// (a namespace either names is covered). A namespace covered by two
	// policies is refused until an admin makes them disjoint.
	Namespaces NamespaceSelector `json:"namespaces"`

	// SlurmUser is the Slurm user the namespaces' placeholder jobs run as,
	// so Slurm's associations, fair share, limits and sacct see the team.
	// It must exist on slurmctld's host and have an association with each
	// allowed account. Empty: onepool's own Slurm user (its token's).
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_.-]{0,31}$`
	SlurmUser string `json:"slurmUser,omitempty"`

	// Partitions the pods may name in slurm.onepool.dev/partition.
	// +optional
	Partitions Choice `json:"partitions,omitempty"`
	// QOS the pods may name in slurm.onepool.dev/qos.
	// +optional
	QOS Choice `json:"qos,omitempty"`
	// Accounts the pods may charge (slurm.onepool.dev/account).
	// +optional
	Accounts Choice `json:"accounts,omitempty"`
	// Exclusive modes the pods may ask (slurm.onepool.dev/exclusive): none,
	// node, user. Empty allowed: only the default ("none" when unset).
	// +optional
	Exclusive Choice `json:"exclusive,omitempty"`

	// MaxGPUsPerPod caps what one pod may ask; 0: no cap.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxGPUsPerPod int32 `json:"maxGPUsPerPod,omitempty"`
	// MaxGPUs caps the GPUs held at once by the placeholder jobs of all the
	// covered namespaces' pods; a pod past it waits. 0: no cap.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxGPUs int32 `json:"maxGPUs,omitempty"`
}

// NamespaceSelector picks namespaces by name or by labels.
type NamespaceSelector struct {
	// Names of namespaces.
	// +optional
	Names []string `json:"names,omitempty"`
	// Selector matches namespaces by their labels; an empty selector
	// matches none (not all: name them, or select them).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Choice is what a pod may name for one Slurm setting.
type Choice struct {
	// Allowed values; "*" allows any. Empty: only Default.
	// +optional
	Allowed []string `json:"allowed,omitempty"`
	// Default is used when the pod names none; empty leaves it to Slurm
	// (the user's default account, the association's default QOS, the
	// default partition) or to the scheduler's defaults.
	// +optional
	Default string `json:"default,omitempty"`
}

// TenantPolicyStatus is what the policy covers now.
type TenantPolicyStatus struct {
	// Namespaces is how many namespaces the policy covers.
	// +optional
	Namespaces int32 `json:"namespaces"`
	// Conditions: Ready (False with reason Conflict when a covered
	// namespace is covered by another policy too).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TenantPolicyList is a list of TenantPolicies.
//
// +kubebuilder:object:root=true
type TenantPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantPolicy `json:"items"`
}
