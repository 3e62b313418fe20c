package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/onepool/onepool/slurmrest"
)

// ArgsAPIVersion and ArgsKind identify this version of the plugin's args in
// the KubeSchedulerConfiguration (pluginConfig[].args).
const (
	ArgsAPIVersion = "onepool.dev/v1alpha1"
	ArgsKind       = "OnepoolArgs"
)

// Args configures the plugin. Zero values take the defaults (SetDefaults).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// SlurmrestURL is slurmrestd's base URL, e.g. http://slurmrestd:6820. Required.
	SlurmrestURL string `json:"slurmrestURL"`
	// TokenFile holds the slurmrestd JWT; it is re-read when it changes. Required.
	TokenFile string `json:"tokenFile"`
	// SlurmrestAPIVersion forces slurmrestd's REST API version (one of
	// slurmrest.APIVersions); empty: the newest both sides speak.
	SlurmrestAPIVersion string `json:"slurmrestAPIVersion,omitempty"`
	// RequestTimeout bounds every slurmrestd request (10s).
	RequestTimeout metav1.Duration `json:"requestTimeout,omitempty"`
	// PollInterval of the Slurm cache (1s).
	PollInterval metav1.Duration `json:"pollInterval,omitempty"`
	// JobListInterval: the cache lists Slurm's jobs in full this often, or
	// sooner when /jobs/state shows a job that appeared, vanished or
	// changed state; its other polls ask /jobs/state alone (10s). A pending
	// pod's message then shows a new Slurm reason up to this late.
	JobListInterval metav1.Duration `json:"jobListInterval,omitempty"`
	// StaleAfter: without a good Slurm refresh for this long, Slurm's state
	// is unknown and nothing is submitted, cancelled or evicted (30s).
	StaleAfter metav1.Duration `json:"staleAfter,omitempty"`
	// StartPollInterval: how often freshly submitted jobs are asked for
	// their state until they start, so a pod binds without waiting for the
	// next cache poll (100ms).
	StartPollInterval metav1.Duration `json:"startPollInterval,omitempty"`
	// WatchInterval: how often every other live job onepool owns is asked
	// for its state (one light /jobs/state request for all of them), so a
	// pod whose job ended is evicted without waiting for the cache's next
	// poll (250ms). With no onepool job live nothing is asked.
	WatchInterval metav1.Duration `json:"watchInterval,omitempty"`

	// DefaultPartition, DefaultQOS and DefaultAccount apply to pods that do
	// not name one in an annotation; empty leaves the choice to Slurm.
	DefaultPartition string `json:"defaultPartition,omitempty"`
	DefaultQOS       string `json:"defaultQOS,omitempty"`
	DefaultAccount   string `json:"defaultAccount,omitempty"`
	// DefaultTimeLimit of placeholder jobs; 0 takes the partition's.
	DefaultTimeLimit metav1.Duration `json:"defaultTimeLimit,omitempty"`
	// MaxTimeLimit caps the time limit a pod may ask for; 0: no cap.
	MaxTimeLimit metav1.Duration `json:"maxTimeLimit,omitempty"`
	// DefaultExclusive is how a pod's job shares its node when the pod's
	// slurm.onepool.dev/exclusive annotation does not say: "none" (the
	// default: GPU by GPU with Slurm jobs), "node" (whole nodes, sbatch
	// --exclusive) or "user" (only with the same user's jobs, --exclusive=user).
	DefaultExclusive string `json:"defaultExclusive,omitempty"`

	// ReleaseListenAddress is where the plugin answers placeholder scripts
	// that ask whether their pod is gone (":10270").
	ReleaseListenAddress string `json:"releaseListenAddress,omitempty"`
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
	SubmitWorkers int `json:"submitWorkers,omitempty"`
	// WorkDir is the placeholder jobs' working directory on the nodes (/tmp).
	WorkDir string `json:"workDir,omitempty"`
}

// SetDefaults fills the zero fields.
func (a *Args) SetDefaults() {
	if a.APIVersion == "" {
		a.APIVersion, a.Kind = ArgsAPIVersion, ArgsKind
	}
	def := func(d *metav1.Duration, v time.Duration) {
		if d.Duration == 0 {
			d.Duration = v
		}
	}
	def(&a.RequestTimeout, 10*time.Second)
	def(&a.PollInterval, time.Second)
	def(&a.StaleAfter, 30*time.Second)
	def(&a.JobListInterval, 10*time.Second)
	def(&a.StartPollInterval, 100*time.Millisecond)
	def(&a.WatchInterval, 250*time.Millisecond)
	if a.ReleaseListenAddress == "" {
		a.ReleaseListenAddress = ":10270"
	}
	if a.SubmitWorkers == 0 {
		a.SubmitWorkers = 16
	}
	if a.WorkDir == "" {
		a.WorkDir = "/tmp"
	}
}

// slurmName is what Slurm accepts as a partition, QOS or account name.
var slurmName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Validate checks defaulted args.
func (a *Args) Validate() error {
	var errs field.ErrorList
	p := field.NewPath("args")
	if a.APIVersion != ArgsAPIVersion || a.Kind != ArgsKind {
		errs = append(errs, field.Invalid(p.Child("apiVersion"), a.APIVersion+"/"+a.Kind, "want "+ArgsAPIVersion+", kind "+ArgsKind))
	}
	if u, err := url.Parse(a.SlurmrestURL); a.SlurmrestURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, field.Invalid(p.Child("slurmrestURL"), a.SlurmrestURL, "want an http(s) URL"))
	}
	if a.TokenFile == "" {
		errs = append(errs, field.Required(p.Child("tokenFile"), "the slurmrestd token file"))
	}
	if v := a.SlurmrestAPIVersion; v != "" && !slices.Contains(slurmrest.APIVersions, v) {
		errs = append(errs, field.NotSupported(p.Child("slurmrestAPIVersion"), v, slurmrest.APIVersions))
	}
	for name, d := range map[string]metav1.Duration{"requestTimeout": a.RequestTimeout, "pollInterval": a.PollInterval,
		"staleAfter": a.StaleAfter, "startPollInterval": a.StartPollInterval, "watchInterval": a.WatchInterval,
		"jobListInterval": a.JobListInterval} {
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child(name), d.Duration.String(), "must be positive"))
		}
	}
	if a.StaleAfter.Duration < 2*a.PollInterval.Duration {
		errs = append(errs, field.Invalid(p.Child("staleAfter"), a.StaleAfter.Duration.String(), "must be at least two poll intervals"))
	}
	for name, v := range map[string]string{"defaultPartition": a.DefaultPartition, "defaultQOS": a.DefaultQOS, "defaultAccount": a.DefaultAccount} {
		if v != "" && !slurmName.MatchString(v) {
			errs = append(errs, field.Invalid(p.Child(name), v, "not a Slurm name"))
		}
	}
	if _, err := parseExclusive(a.DefaultExclusive); err != nil {
		errs = append(errs, field.NotSupported(p.Child("defaultExclusive"), a.DefaultExclusive, exclusiveValues))
	}
	if a.DefaultTimeLimit.Duration < 0 || a.MaxTimeLimit.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("defaultTimeLimit"), a.DefaultTimeLimit.Duration.String(), "time limits must not be negative"))
	}
	if a.MaxTimeLimit.Duration > 0 && a.DefaultTimeLimit.Duration > a.MaxTimeLimit.Duration {
		errs = append(errs, field.Invalid(p.Child("defaultTimeLimit"), a.DefaultTimeLimit.Duration.String(), "exceeds maxTimeLimit"))
	}
	if _, _, err := net.SplitHostPort(a.ReleaseListenAddress); err != nil {
		errs = append(errs, field.Invalid(p.Child("releaseListenAddress"), a.ReleaseListenAddress, err.Error()))
	}
	if _, _, err := releaseHostPort(a.ReleaseURL); err != nil {
		errs = append(errs, field.Invalid(p.Child("releaseURL"), a.ReleaseURL, err.Error()))
	}
	if a.SubmitWorkers < 1 || a.SubmitWorkers > 64 {
		errs = append(errs, field.Invalid(p.Child("submitWorkers"), a.SubmitWorkers, "must be 1 to 64"))
	}
	if !safePath.MatchString(a.WorkDir) {
		errs = append(errs, field.Invalid(p.Child("workDir"), a.WorkDir, "must be an absolute path of plain characters"))
	}
	return errs.ToAggregate()
}

var safePath = regexp.MustCompile(`^/[A-Za-z0-9_./-]*$`)

// releaseHostPort splits the release URL into what bash's /dev/tcp dials.
func releaseHostPort(s string) (host, port string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", err
	}
	if u.Scheme != "http" || u.Port() == "" || u.Path != "" && u.Path != "/" {
		return "", "", fmt.Errorf("want http://host:port")
	}
	host = u.Hostname()
	if !regexp.MustCompile(`^[A-Za-z0-9.:-]+$`).MatchString(host) {
		return "", "", fmt.Errorf("host %q has characters a script cannot carry", host)
	}
	return host, u.Port(), nil
}

// DecodeArgs reads the args the framework hands the factory (nil, or
// runtime.Unknown holding JSON or YAML), refusing unknown fields, then
// defaults and validates them.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	a := &Args{}
	if obj != nil {
		switch o := obj.(type) {
		case *runtime.Unknown:
			raw := o.Raw
			if o.ContentType == runtime.ContentTypeYAML {
				j, err := yaml.YAMLToJSON(raw)
				if err != nil {
					return nil, fmt.Errorf("onepool args: %w", err)
				}
				raw = j
			}
			if len(raw) > 0 {
				d := json.NewDecoder(bytes.NewReader(raw))
				d.DisallowUnknownFields()
				if err := d.Decode(a); err != nil {
					return nil, fmt.Errorf("onepool args: %w", err)
				}
			}
		case *Args:
			*a = *o
		default:
			return nil, fmt.Errorf("onepool args: want %s, got %T", ArgsKind, obj)
		}
	}
	a.SetDefaults()
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("onepool args: %w", err)
	}
	return a, nil
}

// DeepCopyObject makes Args a runtime.Object, as the framework's plugin
// args are.
func (a *Args) DeepCopyObject() runtime.Object {
	c := *a
	return &c
}
