// Package images assembles onepool's images (the Dockerfile's targets) as
// OCI archives from what the lab already built: see Builder.
package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"io"

	"github.com/onepool/onepool/test/lab/oci"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// `make images` assembles the Dockerfile's targets as OCI archives from
// what the lab has already built, instead of building the Dockerfile: the
// Slurm rootfs as Debian made it (one layer, shared by every image), the
// binaries of .lab/bin, the jail plugin and build/slurm's entrypoints.
// No package is installed again and nothing is compressed, so eight images
// take seconds. The Dockerfile stays the way to build them with Docker;
// TestImagesMatchTheDockerfile keeps the two in step (targets, packages,
// files, users, entrypoints).

// spec is one of the Dockerfile's targets: what it adds over the
// base rootfs and how it starts.
type spec struct {
	Name string
	// Packages the Dockerfile installs for it (all are in the lab rootfs:
	// rootfs.Packages()), its own and its parent stage's.
	Packages []string
	// Common: it is built on the slurm-common stage (build/slurm's scripts,
	// the jail plugin).
	Common bool
	// Binary from .lab/bin to /usr/local/bin ("" for none).
	Binary string
	// Script from build/slurm to /usr/local/bin, beside slurm-common's.
	Script string
	Config oci.Config
}

// slurmCommonScripts are build/slurm's entrypoints every Slurm image has.
var slurmCommonScripts = []string{"onepool-munged", "onepool-users", "onepool-login", "onepool-slurm-prepare"}

var slurmCommonPackages = []string{"munge", "slurm-client", "ca-certificates"}

var specs = []spec{
	{Name: "controller-manager", Binary: "onepool-controller-manager",
		Config: oci.Config{Entrypoint: []string{"/usr/local/bin/onepool-controller-manager"}, User: "65532:65532"}},
	{Name: "scheduler", Binary: "onepool-scheduler",
		Config: oci.Config{Entrypoint: []string{"/usr/local/bin/onepool-scheduler"}, User: "65532:65532"}},
	{Name: "node-agent", Common: true, Binary: "onepool-node-agent", Packages: append(slices.Clone(slurmCommonPackages), "slurmd"),
		Config: oci.Config{Entrypoint: []string{"/usr/local/bin/onepool-node-agent", "run"}}},
	{Name: "slurmctld", Common: true, Packages: append(slices.Clone(slurmCommonPackages), "slurmctld", "slurm-wlm-jwt-plugin"),
		Config: oci.Config{Entrypoint: []string{"/usr/sbin/slurmctld", "-D", "-i"}}},
	{Name: "slurmrestd", Common: true, Packages: append(slices.Clone(slurmCommonPackages), "slurmrestd", "slurm-wlm-jwt-plugin"),
		Config: oci.Config{Entrypoint: []string{"/usr/sbin/slurmrestd"}, User: "6820:6820"}},
	{Name: "slurmdbd", Common: true, Packages: append(slices.Clone(slurmCommonPackages), "slurmdbd", "slurm-wlm-jwt-plugin", "mariadb-client"),
		Config: oci.Config{Entrypoint: []string{"/usr/sbin/slurmdbd", "-D"}}},
	{Name: "login", Common: true, Packages: slurmCommonPackages,
		Config: oci.Config{Entrypoint: []string{"/usr/local/bin/onepool-login"}}},
	{Name: "mariadb", Script: "onepool-mariadb", Packages: []string{"mariadb-server"},
		Config: oci.Config{Entrypoint: []string{"/usr/local/bin/onepool-mariadb"}, User: "0"}},
}

// Names are the targets `make images` builds, in order.
func Names() []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

// debianPath is the PATH of Debian's base images.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Builder is where an image's parts are and where it goes.
type Builder struct {
	RootFS string    // the Slurm rootfs; its base layer is RootFS + rootfs.BaseLayerSuffix
	BinDir string    // .lab/bin: onepool's binaries
	Dir    string    // where the archives go (.lab/images)
	Src    string    // the source tree: build/slurm's scripts, spank/onepool_jail.so (`make spank`)
	Log    io.Writer // a line per image
	// Plugin is the jail plugin ("": Src's spank/onepool_jail.so).
	Plugin string
	// Release is the Slurm release the rootfs holds ("" the default). The
	// jail plugin must have been built for it; images of a release other
	// than the default are tagged VERSION-slurmRELEASE.
	Release rootfs.Release
}

// release is Release's name, the default's for none.
func (b Builder) release() string {
	if b.Release.Name == "" {
		return rootfs.Default().Name
	}
	return b.Release.Name
}

// Tag is the tag the images of version get: version itself for the
// default Slurm release, version-slurm26.05 for another.
func (b Builder) Tag(version string) string {
	if b.release() == rootfs.Default().Name {
		return version
	}
	return version + "-slurm" + b.release()
}

// Build writes Dir/NAME.tar (OCI archive, image onepool/NAME:version) for
// each target, from the rootfs's base layer, the binaries in BinDir and,
// from Src, build/slurm's scripts and the jail plugin.
func (b Builder) Build(ctx context.Context, version string, targets []string) error {
	base, err := oci.LoadLayer(b.RootFS + rootfs.BaseLayerSuffix)
	if err != nil {
		return fmt.Errorf("the base image layer (written when the rootfs is built) is missing or broken: %w; "+
			"a rootfs built before it existed needs building again: `make down && rm -rf %s && make images`", err, b.RootFS)
	}
	// Every package an image needs must be in the rootfs it is made of.
	have, err := dpkgInstalled(b.RootFS)
	if err != nil {
		return err
	}
	dir := b.Dir
	layers := filepath.Join(dir, "layers")
	if err := os.MkdirAll(layers, 0o755); err != nil {
		return err
	}
	var common *oci.Layer
	for _, name := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		i := slices.IndexFunc(specs, func(s spec) bool { return s.Name == name })
		if i < 0 {
			return fmt.Errorf("no image target %q (targets: %s)", name, strings.Join(Names(), " "))
		}
		spec := specs[i]
		for _, p := range spec.Packages {
			if !have[p] {
				return fmt.Errorf("image %s needs Debian's %s, which the rootfs %s lacks", name, p, b.RootFS)
			}
		}
		ref := "onepool/" + name + ":" + b.Tag(version)
		archive := filepath.Join(dir, name+".tar")
		// An archive of this very commit is kept: a clean tree's version
		// names its source exactly (a dirty one always builds again).
		if !strings.HasSuffix(version, "-dirty") {
			if v, err := os.ReadFile(filepath.Join(dir, name+".version")); err == nil && strings.TrimSpace(string(v)) == version {
				if _, err := os.Stat(archive); err == nil {
					fmt.Fprintf(b.Log, "images: %s is built (%s)\n", ref, archive)
					continue
				}
			}
		}
		start := time.Now()
		imgLayers := []oci.Layer{base}
		if spec.Common {
			if common == nil {
				plugin := b.Plugin
				if plugin == "" {
					plugin = filepath.Join(b.Src, "spank/onepool_jail.so")
				}
				if err := checkPlugin(plugin, b.release()); err != nil {
					return fmt.Errorf("image %s: %w", name, err)
				}
				files := []oci.File{{Name: slurmconf.JailPluginPath, Mode: 0o755, Source: plugin}}
				for _, s := range slurmCommonScripts {
					files = append(files, oci.File{Name: "usr/local/bin/" + s, Mode: 0o755, Source: filepath.Join(b.Src, "build/slurm", s)})
				}
				c, err := oci.LayerFromFiles(filepath.Join(layers, "slurm-common.tar"), files)
				if err != nil {
					return fmt.Errorf("image %s: %w", name, err)
				}
				common = &c
			}
			imgLayers = append(imgLayers, *common)
		}
		var own []oci.File
		if spec.Binary != "" {
			own = append(own, oci.File{Name: "usr/local/bin/" + spec.Binary, Mode: 0o755, Source: filepath.Join(b.BinDir, spec.Binary)})
		}
		if spec.Script != "" {
			own = append(own, oci.File{Name: "usr/local/bin/" + spec.Script, Mode: 0o755, Source: filepath.Join(b.Src, "build/slurm", spec.Script)})
		}
		if len(own) > 0 {
			top, err := oci.LayerFromFiles(filepath.Join(layers, name+".tar"), own)
			if err != nil {
				return fmt.Errorf("image %s: %w", name, err)
			}
			imgLayers = append(imgLayers, top)
		}
		cfg := spec.Config
		cfg.Env = []string{debianPath}
		cfg.Labels = map[string]string{"org.opencontainers.image.version": version, "org.opencontainers.image.title": "onepool " + name}
		if spec.Common {
			cfg.Labels["dev.onepool.slurm.release"] = b.release()
		}
		if err := oci.WriteArchive(archive, ref, cfg, imgLayers); err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".version"), []byte(version+"\n"), 0o644); err != nil {
			return err
		}
		st, err := os.Stat(archive)
		if err != nil {
			return err
		}
		fmt.Fprintf(b.Log, "images: %s -> %s (%d MB, %s)\n", ref, archive, st.Size()>>20, time.Since(start).Round(10*time.Millisecond))
	}
	return nil
}

// dpkgInstalled lists the packages dpkg says are installed in root.
func dpkgInstalled(root string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, para := range strings.Split(string(b), "\n\n") {
		var pkg string
		installed := false
		for _, line := range strings.Split(para, "\n") {
			if v, ok := strings.CutPrefix(line, "Package: "); ok {
				pkg = v
			}
			if strings.HasPrefix(line, "Status: ") && strings.HasSuffix(line, " installed") {
				installed = true
			}
		}
		if pkg != "" && installed {
			out[pkg] = true
		}
	}
	return out, nil
}
