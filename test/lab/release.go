package lab

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"github.com/onepool/onepool/test/lab/proc"
	"os"
	"path/filepath"
	"strings"
)

// EnvSlurm picks the Slurm release the lab runs (`make up SLURM=26.05`).
const EnvSlurm = "ONEPOOL_LAB_SLURM"

// SlurmVersion is one Slurm release the lab runs: Debian's packages of
// one suite in a rootfs of its own, so switching releases rebuilds
// nothing (each keeps its state, accounting database and jail).
type SlurmVersion struct {
	Name  string // "24.11"
	Suite string // the Debian suite debootstrap builds
	// Dir is the rootfs folder in the lab dir (its manifest is Dir+".manifest").
	Dir string
	// RESTAPI is the newest slurmrestd API version of the release.
	RESTAPI string
	// proven is test/lab/rootfs-<suite>.manifest as committed.
	proven string
	// aptOptions go to every apt-get in the chroot.
	aptOptions []string
}

//go:embed rootfs-trixie.manifest
var provenTrixie string

//go:embed rootfs-sid.manifest
var provenSid string

// slurmReleases: the first is the default.
var slurmReleases = []SlurmVersion{
	{Name: "24.11", Suite: "trixie", Dir: "rootfs", RESTAPI: "v0.0.42", proven: provenTrixie},
	// Debian sid (forky's Slurm, 26.05). This mirror serves sid's
	// InRelease past its Valid-Until at times (17 days once): apt would
	// refuse the whole suite.
	{Name: "26.05", Suite: "sid", Dir: "rootfs-26.05", RESTAPI: "v0.0.44", proven: provenSid,
		aptOptions: []string{"-o", "Acquire::Check-Valid-Until=false"}},
}

// ReleaseNamed is the lab's release of that name ("" is the default).
func ReleaseNamed(name string) (SlurmVersion, error) {
	if name == "" {
		return slurmReleases[0], nil
	}
	var names []string
	for _, r := range slurmReleases {
		if r.Name == name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return SlurmVersion{}, fmt.Errorf("%s=%q: the lab runs Slurm %s", EnvSlurm, name, strings.Join(names, " or "))
}

// dir is the rootfs folder ("rootfs" for a zero SlurmVersion).
func (r SlurmVersion) dir() string {
	if r.Dir == "" {
		return slurmReleases[0].Dir
	}
	return r.Dir
}

// restAPI is the release's REST API version (the default's for a zero value).
func (r SlurmVersion) restAPI() string {
	if r.RESTAPI == "" {
		return slurmReleases[0].RESTAPI
	}
	return r.RESTAPI
}

// ProvenManifestFile is the release's manifest in test/lab.
func (r SlurmVersion) ProvenManifestFile() string { return "rootfs-" + r.Suite + ".manifest" }

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
