package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OnepoolArgs configures the plugin. See v1.OnepoolArgs for each field;
// here every default is filled in.
//
// +kubebuilder:object:root=true
type OnepoolArgs struct {
	metav1.TypeMeta

	SlurmrestURL string
	TokenFile    string
	JWTKeyFile   string
	TokenUser    string
	// TokenLifetime of minted tokens (with JWTKeyFile).
	TokenLifetime   metav1.Duration
	SlurmrestCAFile string
	// PlaceholderKeySecret: "namespace/name" of the comment signing key.
	PlaceholderKeySecret string
	// DefaultTenantPolicy: the policy of namespaces no policy covers.
	DefaultTenantPolicy string
	SlurmrestAPIVersion string
	RequestTimeout      metav1.Duration
	PollInterval        metav1.Duration
	JobListInterval     metav1.Duration
	StaleAfter          metav1.Duration
	StartPollInterval   metav1.Duration
	WatchInterval       metav1.Duration

	DefaultPartition string
	DefaultQOS       string
	DefaultAccount   string
	DefaultTimeLimit metav1.Duration
	MaxTimeLimit     metav1.Duration
	DefaultExclusive string

	ReleaseListenAddress string
	ReleaseURL           string
	ImmediateAllocation  bool

	SubmitWorkers int32
	WorkDir       string
}
