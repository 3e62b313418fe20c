package lab

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// EnvE2E set to 1 lets lab tests bring the lab up (`make e2e` and `make
// test` set it). Without it they use a lab that already runs, or skip.
const EnvE2E = "ONEPOOL_E2E"

var (
	sharedOnce sync.Once
	sharedLab  *Lab
	sharedErr  error
	sharedSkip string
)

// Shared returns the lab for tests, bringing it up (or reusing a running one)
// once per test binary, and clean (StartClean: no Slurm job, no drain, no
// cordon, whatever an earlier stage left). ONEPOOL_LAB_ONLY=slurm brings up only Slurm. A lab
// that cannot come up fails the test with the step and log that broke.
//
// The test is skipped, with the reason, when the lab cannot be meant: the
// user is not root (the lab needs chroot, mount and mknod), or ONEPOOL_E2E
// is not 1 and no lab runs, so a plain `go test ./...` never spends minutes
// building one.
func Shared(tb testing.TB) *Lab {
	tb.Helper()
	sharedOnce.Do(func() {
		cfg, err := ConfigFromEnv()
		if err != nil {
			sharedErr = err
			return
		}
		if os.Geteuid() != 0 {
			sharedSkip = "lab tests need root (the lab uses chroot, mount and mknod): run `make test` or `make e2e` as root"
			return
		}
		l, err := New(cfg)
		if err != nil {
			sharedErr = err
			return
		}
		if os.Getenv(EnvE2E) != "1" && l.Status(io.Discard) > 0 {
			sharedSkip = "no lab runs here: `make e2e` (or " + EnvE2E + "=1) brings it up for these tests, `make up` starts one to reuse"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		slurmOnly := os.Getenv("ONEPOOL_LAB_ONLY") == "slurm"
		if slurmOnly {
			sharedErr = l.UpSlurm(ctx)
		} else {
			sharedErr = l.Up(ctx)
		}
		if sharedErr == nil {
			// Whatever the stage before left, this one starts clean.
			sharedErr = l.StartClean(ctx, slurmOnly)
		}
		sharedLab = l
	})
	if sharedSkip != "" {
		tb.Skip(sharedSkip)
	}
	if sharedErr != nil {
		tb.Fatalf("lab: %v", sharedErr)
	}
	return sharedLab
}
