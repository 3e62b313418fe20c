package main

import (
	"context"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/onepool/onepool/agent"
)

// Env vars of release-wait.
const (
	envReleaseURL     = "ONEPOOL_RELEASE_URL"
	envReleaseTimeout = "ONEPOOL_RELEASE_TIMEOUT"
)

// cmdReleaseWait is slurmd's Epilog for onepool's placeholder jobs: it
// returns once onepool says the job's pods are gone (other jobs at once).
// It always exits 0: a failing Epilog would drain the node.
func cmdReleaseWait(args []string, logger *log.Logger, stderr io.Writer) (int, error) {
	f := newFlags("release-wait", stderr)
	cfg := agent.ReleaseConfig{JobID: os.Getenv("SLURM_JOB_ID"), Comment: os.Getenv("SLURM_JOB_COMMENT"), Every: 500 * time.Millisecond}
	f.String(&cfg.URL, "release-url", envReleaseURL, "", "onepool scheduler's release endpoint, http://host:port (required)")
	f.Duration(&cfg.Timeout, "timeout", envReleaseTimeout, 90*time.Second, "longest wait for the pods to go (keep it under PrologEpilogTimeout)")
	if err := f.parse(args); err != nil {
		return 2, err
	}
	cfg.Logf = logger.Printf
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	start := time.Now()
	out, err := agent.WaitForRelease(ctx, cfg)
	if err != nil {
		logger.Printf("release-wait: job %s: %v; not waiting", cfg.JobID, err)
		return 0, nil
	}
	if out != agent.ReleaseNotOnepool {
		logger.Printf("release-wait: job %s: %s after %s", cfg.JobID, out, time.Since(start).Round(time.Millisecond))
	}
	return 0, nil
}
