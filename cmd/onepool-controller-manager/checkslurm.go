package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/onepool/onepool/internal/slurmcheck"
	"github.com/onepool/onepool/slurmrest"
)

// runCheckSlurm is `onepool-controller-manager check-slurm [the manager's
// flags]`: it reads the live cluster through slurmrestd and names each
// setting of the README's slurm.conf checklist it finds missing. 0: none
// missing; 1: some missing, or slurmrestd did not answer; 2: bad flags.
func runCheckSlurm(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "check-slurm: %v\n", err)
		return 2
	}
	client, err := slurmrest.New(c.slurmREST())
	if err != nil {
		fmt.Fprintf(stderr, "check-slurm: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.slurmTimeout)
	defer cancel()
	rep, err := slurmcheck.Check(ctx, client)
	if err != nil {
		fmt.Fprintf(stderr, "check-slurm: %v\n", err)
		return 1
	}
	for _, f := range rep.Missing {
		fmt.Fprintf(stdout, "MISSING %s\n  %s\n", f.Setting, f.Why)
	}
	for _, f := range rep.Unchecked {
		fmt.Fprintf(stdout, "NOT CHECKED %s\n  %s\n", f.Setting, f.Why)
	}
	if len(rep.Missing) > 0 {
		return 1
	}
	checked := "GPU GRES, partitions, slurmdbd's QOS, QOS preemption"
	if len(rep.Unchecked) > 0 {
		checked = "GPU GRES, partitions"
	}
	v, _ := client.APIVersion(ctx)
	fmt.Fprintf(stdout, "ok: Slurm has what onepool checked (%s; slurmrestd %s)\n", checked, v)
	return 0
}

// checkSlurmAtStart has the leader look at Slurm once: each missing
// setting is logged as a warning; the manager runs either way. slurmrestd
// not answering is asked again, a bounded number of times.
func checkSlurmAtStart(r slurmcheck.Reader, log logr.Logger, timeout time.Duration) manager.RunnableFunc {
	return func(ctx context.Context) error {
		const tries = 6
		var err error
		for i := 0; i < tries; i++ {
			cctx, cancel := context.WithTimeout(ctx, 4*timeout)
			var rep slurmcheck.Report
			rep, err = slurmcheck.Check(cctx, r)
			cancel()
			if err == nil {
				for _, f := range rep.Missing {
					log.Info("WARNING: Slurm seems to lack a setting onepool needs (README: slurm.conf checklist)", "setting", f.Setting, "why", f.Why)
				}
				for _, f := range rep.Unchecked {
					log.Info("Slurm's setting not checked", "setting", f.Setting, "why", f.Why)
				}
				if len(rep.Missing) == 0 {
					log.Info("Slurm lacks none of the settings onepool checked")
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(10 * time.Second):
			}
		}
		log.Info("WARNING: Slurm's settings were not checked: slurmrestd did not answer", "tries", tries, "error", err.Error())
		return nil
	}
}
