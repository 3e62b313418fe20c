package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OnepoolArgs configures the plugin. Fields left out take their defaults.
//
// +kubebuilder:object:root=true
type OnepoolArgs struct {
	metav1.TypeMeta `json:",inline"`

	// SlurmrestURL is slurmrestd's base URL, e.g. http://slurmrestd:6820. Required.
	SlurmrestURL string `json:"slurmrestURL"`
	// TokenFile holds the slurmrestd JWT; it is re-read when it changes.
	// This or JWTKeyFile.
	TokenFile string `json:"tokenFile,omitempty"`
	// JWTKeyFile holds the cluster's jwt_hs256.key (slurmctld's and
	// slurmrestd's): the plugin mints its own short-lived tokens for
	// TokenUser and renews them before they expire. This or TokenFile.
	JWTKeyFile string `json:"jwtKeyFile,omitempty"`
	// TokenUser is the Slurm user of minted tokens ("slurm"): SlurmUser or
	// root, since onepool submits jobs as other users.
	TokenUser *string `json:"tokenUser,omitempty"`
	// TokenLifetime of each minted token (1h; 5m to 24h).
	TokenLifetime *metav1.Duration `json:"tokenLifetime,omitempty"`
	// SlurmrestCAFile holds the PEM CA bundle of slurmrestd's (or its TLS
	// proxy's) certificate, for an https slurmrestURL; empty: the system's
	// roots.
	SlurmrestCAFile string `json:"slurmrestCAFile,omitempty"`
	// PlaceholderKeySecret is the Secret ("namespace/name") that holds the
	// key onepool signs its placeholder jobs' comments with, so that no
	// Slurm user can make a job onepool takes for its own. The scheduler
	// makes it (a random key) if it does not exist and reads it at start;
	// a "previous" key in it is still accepted (a rotation). Required.
	PlaceholderKeySecret string `json:"placeholderKeySecret"`
	// DefaultTenantPolicy names the TenantPolicy of namespaces that no
	// policy covers (a single-team install); empty: their pods are refused.
	DefaultTenantPolicy string `json:"defaultTenantPolicy,omitempty"`
	// SlurmrestAPIVersion forces slurmrestd's REST API version (one of
	// slurmrest.APIVersions); empty: the newest both sides speak.
	SlurmrestAPIVersion string `json:"slurmrestAPIVersion,omitempty"`
	// RequestTimeout bounds every slurmrestd request (10s).
	RequestTimeout *metav1.Duration `json:"requestTimeout,omitempty"`
	// PollInterval of the Slurm cache (1s).
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// JobListInterval: the cache follows onepool's jobs by id (their
	// states each PollInterval) and reads a pending placeholder in full
	// this often (10s): a pending pod's message shows a new Slurm reason up
	// to this late.
	JobListInterval *metav1.Duration `json:"jobListInterval,omitempty"`
	// StaleAfter: without a good Slurm refresh for this long, Slurm's state
	// is unknown and nothing is submitted, cancelled or evicted (30s).
	StaleAfter *metav1.Duration `json:"staleAfter,omitempty"`
	// StartPollInterval: how often freshly submitted jobs are asked for
	// their state until they start, so a pod binds without waiting for the
	// next cache poll (100ms).
	StartPollInterval *metav1.Duration `json:"startPollInterval,omitempty"`
	// WatchInterval: how often every other live job onepool owns is asked
	// for its state (one light /jobs/state request for all of them), so a
	// pod whose job ended is evicted without waiting for the cache's next
	// poll (250ms). With no onepool job live nothing is asked.
	WatchInterval *metav1.Duration `json:"watchInterval,omitempty"`

	// DefaultPartition, DefaultQOS and DefaultAccount apply to pods that do
	// not name one in an annotation; empty leaves the choice to Slurm.
	DefaultPartition string `json:"defaultPartition,omitempty"`
	DefaultQOS       string `json:"defaultQOS,omitempty"`
	DefaultAccount   string `json:"defaultAccount,omitempty"`
	// DefaultTimeLimit of placeholder jobs; none takes the partition's.
	DefaultTimeLimit *metav1.Duration `json:"defaultTimeLimit,omitempty"`
	// MaxTimeLimit caps the time limit a pod may ask for; none: no cap.
	MaxTimeLimit *metav1.Duration `json:"maxTimeLimit,omitempty"`
	// DefaultExclusive is how a pod's job shares its node when the pod's
	// slurm.onepool.dev/exclusive annotation does not say: "none" (the
	// default: GPU by GPU with Slurm jobs), "node" (whole nodes, sbatch
	// --exclusive) or "user" (only with the same user's jobs, --exclusive=user).
	DefaultExclusive string `json:"defaultExclusive,omitempty"`

	// ReleaseListenAddress is where the plugin answers placeholder scripts
	// that ask whether their pod is gone (":10270").
	ReleaseListenAddress *string `json:"releaseListenAddress,omitempty"`
	// ReleaseURL is how placeholder scripts on the Slurm nodes reach that
	// address: plain http://host:port (bash's /dev/tcp, no TLS). Required.
	ReleaseURL string `json:"releaseURL"`

	// ImmediateAllocation asks Slurm for an allocation granted inside the
	// request (salloc --immediate) before queueing a batch placeholder:
	// when Slurm can place the pod now (resources free, nothing of higher
	// priority waiting), it is bound in one REST round trip instead of
	// slurmctld's next scheduling tick. Turn it on only where every Slurm
	// node runs onepool's release epilog (onepool-node-agent release-wait,
	// as charts/slurm sets it up): an allocation has no script to hold its
	// GPUs while the pod stops, the epilog does (false).
	ImmediateAllocation bool `json:"immediateAllocation,omitempty"`

	// SubmitWorkers submit placeholder jobs in parallel (16).
	SubmitWorkers *int32 `json:"submitWorkers,omitempty"`
	// WorkDir is the placeholder jobs' working directory on the nodes (/tmp).
	WorkDir *string `json:"workDir,omitempty"`
}
