package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// SlurmVersion is one Slurm release the lab runs (package rootfs: its
// Debian suite and rootfs).
type SlurmVersion = rootfs.Release

// Release is the Slurm release this lab runs.
func (l *Lab) Release() SlurmVersion { return l.cfg.Slurm }

// releaseMarker records which release the lab's daemons run from.
func (l *Lab) releaseMarker() string { return l.path("run", "slurm-release") }

// checkRelease refuses to bring up one release while the daemons of the
// other run (they share ports, pid files and the Kubernetes side).
func (l *Lab) checkRelease(context.Context) error {
	b, err := os.ReadFile(l.releaseMarker())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	running := strings.TrimSpace(string(b))
	if pid, prog := l.procs.ReadPid("slurmctld"); running == l.Release().Name || pid == 0 || !proc.Alive(pid, prog) {
		return nil
	}
	return fmt.Errorf("the lab runs Slurm %s; `make down` before `make up %s=%s`", running, "SLURM", l.Release().Name)
}

// recordRelease notes the release whose daemons now run.
func (l *Lab) recordRelease(context.Context) error {
	if err := os.MkdirAll(filepath.Dir(l.releaseMarker()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(l.releaseMarker(), []byte(l.Release().Name+"\n"), 0o644)
}

// rootfsBuilder builds and checks this lab's Slurm rootfs.
func (l *Lab) rootfsBuilder() rootfs.Builder {
	return rootfs.Builder{Root: l.RootFS(), Release: l.cfg.Slurm, LogDir: l.LogDir(), Log: l.cfg.Log}
}

func (l *Lab) ensureRootFS(ctx context.Context) error { return l.rootfsBuilder().Ensure(ctx) }

// ManifestFile is the list of packages the lab's rootfs was built from.
func (l *Lab) ManifestFile() string { return l.rootfsBuilder().ManifestFile() }

// ManifestStatus writes the rootfs's key package versions and whether the
// rootfs matches the proven manifest.
func (l *Lab) ManifestStatus(ctx context.Context, w io.Writer) error {
	return l.rootfsBuilder().Status(ctx, w)
}

// AcceptManifest records the rootfs's packages as proven in this
// checkout's test/lab/rootfs.
func (l *Lab) AcceptManifest(ctx context.Context) (string, error) {
	top, err := repoRoot()
	if err != nil {
		return "", err
	}
	return l.rootfsBuilder().Accept(ctx, top)
}
