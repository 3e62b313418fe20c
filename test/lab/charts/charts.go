// Package charts is onepool's two Helm charts as the lab installs them: the
// helm command with the lab's kubeconfig, charts/onepool (release onepool in
// onepool-system) and charts/slurm (release slurm in slurm), their values,
// and reading back what they made (pods, rollouts, leases, logs). The charts
// are the real thing; what the lab does around them (stopping its own
// processes first, the token Secret, the real node) stays in package lab.
// See its README.
package charts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

const (
	// Release is the onepool chart's release name in the lab, and
	// Namespace its namespace.
	Release   = "onepool"
	Namespace = "onepool-system"
	// ControllerManagerSA and SchedulerSA are the onepool chart's ServiceAccounts.
	ControllerManagerSA = "onepool-controller-manager"
	SchedulerSA         = "onepool-scheduler"
	// SchedulerLease and ControllerManagerLease are the components' leader leases.
	SchedulerLease         = "onepool-scheduler"
	ControllerManagerLease = "onepool-controller-manager"
	// TokenSecret holds the lab's slurmrestd token for the onepool chart
	// (values slurm.tokenSecret.name in ci/lab-values.yaml).
	TokenSecret = "slurm-token"
	// InstanceSelector selects every object of the onepool release.
	InstanceSelector = "app.kubernetes.io/instance=" + Release
	// KubeVersion is the Kubernetes version charts are rendered for.
	KubeVersion = "1.35.4"
	// helmTimeout bounds a helm run whose context has no deadline.
	helmTimeout = 2 * time.Minute
)

// Deployments are the onepool chart's Deployments, and Leases their leader
// leases, in the same order.
var (
	Deployments = []string{Release + "-controller-manager", Release + "-scheduler"}
	Leases      = []string{ControllerManagerLease, SchedulerLease}
)

// Dir is charts/<name> of the onepool checkout that holds the working
// directory.
func Dir(name string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if st, err := os.Stat(filepath.Join(d, "charts", name)); err == nil && st.IsDir() {
				return filepath.Join(d, "charts", name), nil
			}
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("no onepool checkout with charts/%s above %s", name, wd)
		}
	}
}

// Helm runs a helm binary against one cluster, with its cache, config and
// data under Home so the lab never touches the user's.
type Helm struct {
	Bin, Kubeconfig, Home string
}

// Run runs helm with args within ctx's deadline, or helmTimeout when ctx
// has none. Its error carries helm's stderr.
func (h Helm) Run(ctx context.Context, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, helmTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.Kubeconfig, "HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"), "HELM_DATA_HOME="+filepath.Join(h.Home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Values are the values files the lab installs charts/onepool (in dir) with.
func Values(dir string) []string {
	return []string{filepath.Join(dir, "ci", "lab-values.yaml"), filepath.Join(dir, "ci", "lab-node-values.yaml")}
}

// TemplateArgs is `helm template` of charts/onepool (in dir) as the lab
// renders it, with extra arguments (--set, --show-only...).
func TemplateArgs(dir string, extra ...string) []string {
	return append([]string{"template", Release, dir, "--namespace", Namespace,
		"-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--kube-version", KubeVersion}, extra...)
}

// UpgradeArgs is `helm upgrade --install` of charts/onepool (in dir) with
// the lab's values and extra arguments (--set, --wait, ...).
func UpgradeArgs(dir string, extra ...string) []string {
	args := []string{"upgrade", "--install", Release, dir, "--namespace", Namespace}
	for _, v := range Values(dir) {
		args = append(args, "-f", v)
	}
	return append(args, extra...)
}

// UninstallArgs is `helm uninstall --wait` of the onepool release.
func UninstallArgs() []string {
	return []string{"uninstall", Release, "--namespace", Namespace, "--wait", "--timeout", "90s"}
}
