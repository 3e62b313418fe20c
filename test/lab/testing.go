package lab

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

var (
	sharedOnce sync.Once
	sharedLab  *Lab
	sharedErr  error
)

// Shared returns the lab for tests, bringing it up (or reusing a running one)
// once per test binary. ONEPOOL_LAB_ONLY=slurm brings up only Slurm. A lab
// that cannot come up fails the test with the step and log that broke.
func Shared(tb testing.TB) *Lab {
	tb.Helper()
	sharedOnce.Do(func() {
		cfg, err := ConfigFromEnv()
		if err != nil {
			sharedErr = err
			return
		}
		l, err := New(cfg)
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if os.Getenv("ONEPOOL_LAB_ONLY") == "slurm" {
			sharedErr = l.UpSlurm(ctx)
		} else {
			sharedErr = l.Up(ctx)
		}
		sharedLab = l
	})
	if sharedErr != nil {
		tb.Fatalf("lab: %v", sharedErr)
	}
	return sharedLab
}
