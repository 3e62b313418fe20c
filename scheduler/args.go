package scheduler

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/onepool/onepool/scheduler/apis/config"
	configv1 "github.com/onepool/onepool/scheduler/apis/config/v1"
	"github.com/onepool/onepool/slurmrest"
)

// Args is the plugin's configuration as the framework hands it over:
// decoded from pluginConfig[].args (apiVersion
// kubescheduler.config.k8s.io/v1, kind OnepoolArgs), defaulted and
// converted (scheduler/apis/config).
type Args = config.OnepoolArgs

// slurmName is what Slurm accepts as a partition, QOS or account name.
var slurmName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// validateArgs checks defaulted args.
func validateArgs(a *Args) error {
	var errs field.ErrorList
	p := field.NewPath("args")
	if u, err := url.Parse(a.SlurmrestURL); a.SlurmrestURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, field.Invalid(p.Child("slurmrestURL"), a.SlurmrestURL, "want an http(s) URL"))
	}
	switch {
	case a.TokenFile == "" && a.JWTKeyFile == "":
		errs = append(errs, field.Required(p.Child("tokenFile"), "the slurmrestd token file, or jwtKeyFile"))
	case a.TokenFile != "" && a.JWTKeyFile != "":
		errs = append(errs, field.Invalid(p.Child("jwtKeyFile"), a.JWTKeyFile, "tokenFile and jwtKeyFile both set; want one"))
	case a.JWTKeyFile != "" && (a.TokenLifetime.Duration < slurmrest.MinTokenLifetime || a.TokenLifetime.Duration > slurmrest.MaxTokenLifetime):
		errs = append(errs, field.Invalid(p.Child("tokenLifetime"), a.TokenLifetime.Duration.String(),
			fmt.Sprintf("want %s to %s", slurmrest.MinTokenLifetime, slurmrest.MaxTokenLifetime)))
	}
	if _, _, err := secretRef(a.PlaceholderKeySecret); err != nil {
		errs = append(errs, field.Invalid(p.Child("placeholderKeySecret"), a.PlaceholderKeySecret, err.Error()))
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

// argsFrom takes the args the framework hands the factory and validates
// them. Anything but OnepoolArgs means the framework could not decode
// them (onepool's kinds not registered with it: scheme.Install).
func argsFrom(obj runtime.Object) (*Args, error) {
	a, ok := obj.(*Args)
	if !ok || a == nil {
		return nil, fmt.Errorf("onepool args: got %T, want kind OnepoolArgs of apiVersion %s decoded by the scheduler framework", obj, configv1.SchemeGroupVersion)
	}
	a = a.DeepCopy()
	if err := validateArgs(a); err != nil {
		return nil, fmt.Errorf("onepool args: %w", err)
	}
	return a, nil
}
