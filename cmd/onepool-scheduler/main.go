// Command onepool-scheduler is kube-scheduler with onepool's plugin built
// in: configure a profile named onepool that enables the Onepool plugin
// (see scheduler/README.md).
//
// It is kube-scheduler's own command (same flags, same Setup and Run) with
// one addition: the leader lease's lock is wrapped so the plugin knows
// whether this replica holds the lease. kube-scheduler builds the plugins
// of every replica; only the leader's may act on Slurm and on pods.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/onepool/onepool/internal/buildinfo"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/scheduler/apis/config/scheme"
)

func main() {
	// OnepoolArgs decoded, defaulted and converted by the framework, as an
	// in-tree plugin's args are.
	if err := scheme.Install(); err != nil {
		fmt.Fprintln(os.Stderr, "onepool-scheduler: registering OnepoolArgs:", err)
		os.Exit(1)
	}
	os.Exit(cli.Run(newCommand()))
}

func newCommand() *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:  "onepool-scheduler",
		Long: "kube-scheduler with onepool's plugin: pods with schedulerName onepool wait in Slurm's queue and are bound where Slurm allocates.",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return run(opts) },
		Args: cobra.NoArgs,
	}
	nfs := opts.Flags
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range nfs.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	return cmd
}

func run(opts *options.Options) error {
	verflag.PrintAndExitIfRequested()
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	klog.FromContext(ctx).Info("onepool-scheduler", "build", buildinfo.Read().String())
	legacyregistry.RawMustRegister(buildinfo.Collector("scheduler"))
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()

	gate := scheduler.NewLeaderGate()
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(scheduler.Name, scheduler.Factory(gate)))
	if err != nil {
		return err
	}
	if cc.LeaderElection != nil {
		// The identity is what the Lease's holderIdentity names: a log
		// line tells which replica leads.
		klog.FromContext(ctx).Info("Leader election", "lease", cc.LeaderElection.Lock.Describe(), "identity", cc.LeaderElection.Lock.Identity())
		cc.LeaderElection.Lock = gate.Wrap(cc.LeaderElection.Lock, cc.LeaderElection.RenewDeadline)
	} else {
		gate.Lead()
	}
	if err := app.Run(ctx, cc, sched); err != nil {
		return fmt.Errorf("onepool-scheduler: %w", err)
	}
	return nil
}
