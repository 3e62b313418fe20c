// Package rootfs builds the Debian chroot the lab's Slurm runs in, one per
// Slurm release (Debian's own packages: trixie for 24.11, sid for 26.05),
// and keeps track of which package versions it holds against the ones
// the project last proved. Its base layer, the rootfs as Debian made it, is
// the base of onepool's images.
package rootfs

import (
	_ "embed"
	"fmt"
	"strings"
)

// EnvSlurm picks the Slurm release the lab runs (`make up SLURM=26.05`).
const EnvSlurm = "ONEPOOL_LAB_SLURM"

// Release is one Slurm release the lab runs: Debian's packages of
// one suite in a rootfs of its own, so switching releases rebuilds
// nothing (each keeps its state, accounting database and jail).
type Release struct {
	Name  string // "24.11"
	Suite string // the Debian suite debootstrap builds
	// Dir is the rootfs folder in the lab dir (its manifest is Dir+".manifest").
	Dir string
	// RESTAPI is the newest slurmrestd API version of the release.
	RESTAPI string
	// proven is test/lab/rootfs/rootfs-<suite>.manifest as committed.
	proven string
	// aptOptions go to every apt-get in the chroot.
	aptOptions []string
}

//go:embed rootfs-trixie.manifest
var provenTrixie string

//go:embed rootfs-sid.manifest
var provenSid string

// Releases are the Slurm releases the lab runs; the first is the default.
func Releases() []Release {
	return []Release{
		{Name: "24.11", Suite: "trixie", Dir: "rootfs", RESTAPI: "v0.0.42", proven: provenTrixie},
		// Debian sid (forky's Slurm, 26.05). This mirror serves sid's
		// InRelease past its Valid-Until at times (17 days once): apt would
		// refuse the whole suite.
		{Name: "26.05", Suite: "sid", Dir: "rootfs-26.05", RESTAPI: "v0.0.44", proven: provenSid,
			aptOptions: []string{"-o", "Acquire::Check-Valid-Until=false"}},
	}
}

// Default is the release the lab runs unless told otherwise.
func Default() Release { return Releases()[0] }

// Named is the lab's release of that name ("" is the default).
func Named(name string) (Release, error) {
	if name == "" {
		return Default(), nil
	}
	var names []string
	for _, r := range Releases() {
		if r.Name == name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return Release{}, fmt.Errorf("%s=%q: the lab runs Slurm %s", EnvSlurm, name, strings.Join(names, " or "))
}

// Folder is the rootfs folder in the lab dir ("rootfs" for a zero Release).
func (r Release) Folder() string {
	if r.Dir == "" {
		return Default().Dir
	}
	return r.Dir
}

// API is the release's REST API version (the default's for a zero value).
func (r Release) API() string {
	if r.RESTAPI == "" {
		return Default().RESTAPI
	}
	return r.RESTAPI
}

// ProvenManifestFile is the release's manifest, in test/lab/rootfs.
func (r Release) ProvenManifestFile() string { return "rootfs-" + r.Suite + ".manifest" }
