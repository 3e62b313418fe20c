package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/oci"
)

// `make images` assembles the Dockerfile's targets as OCI archives from
// what the lab has already built, instead of building the Dockerfile: the
// Slurm rootfs as Debian made it (one layer, shared by every image), the
// binaries of .lab/bin, the jail plugin and build/slurm's entrypoints.
// No package is installed again and nothing is compressed, so eight images
// take seconds. The Dockerfile stays the way to build them with Docker;
// TestImagesMatchTheDockerfile keeps the two in step (targets, packages,
// files, users, entrypoints).

// baseLayerSuffix names the base layer beside its rootfs (.lab/rootfs.layer.tar).
const baseLayerSuffix = ".layer.tar"

// imageUsers are made in a new rootfs before Debian's packages, with the
// ids the Dockerfile gives them: slurmctld, slurmdbd and every slurmd must
// agree on slurm's uid; slurmrestd refuses to run as root or SlurmUser.
var imageUsers = [][]string{
	{"groupadd", "-g", "64030", "slurm"},
	{"useradd", "-r", "-u", "64030", "-g", "slurm", "-d", "/var/lib/slurm", "-s", "/usr/sbin/nologin", "slurm"},
	{"groupadd", "-g", "6820", "slurmrestd"},
	{"useradd", "-r", "-u", "6820", "-g", "slurmrestd", "-s", "/usr/sbin/nologin", "slurmrestd"},
}

// baseLayerSkips are left out of the base layer, with what is under them:
// what the runtime provides (/dev, /proc, ...), apt's caches and docs, and
// the munge key Debian's package generates (each cluster brings its own).
var baseLayerSkips = []string{
	"dev/", "proc/", "sys/", "run/", "tmp/", "var/tmp/",
	"var/lib/apt/lists/", "var/cache/apt/", "var/log/",
	// mariadb's postinst database: onepool-mariadb makes its own on first start.
	"var/lib/mysql/",
	"usr/share/doc/", "usr/share/man/", "usr/share/info/",
	"etc/munge/munge.key", "etc/resolv.conf",
}

// baseLayerPackages: the lab's own tools in the rootfs, which no image
// needs (Debian's files of the packages these globs name are left out):
// the real node's runtime, the jail's shell, the compiler the jail plugin
// is built with (gcc-14 in trixie, gcc-15 in sid).
var baseLayerPackages = []string{"containerd", "runc", "busybox-static",
	"gcc-[0-9]*-x86-64-linux-gnu", "cpp-[0-9]*-x86-64-linux-gnu", "libgcc-[0-9]*-dev", "libasan[0-9]*", "libtsan[0-9]*",
	"liblsan[0-9]*", "libubsan[0-9]*", "libhwasan[0-9]*", "binutils-x86-64-linux-gnu", "linux-libc-dev"}

// writeBaseLayer writes root (a rootfs just built) as a layer tar at path,
// and its digest beside it.
func writeBaseLayer(root, path string) (oci.Layer, error) {
	pkgFiles, err := dpkgFiles(root, baseLayerPackages)
	if err != nil {
		return oci.Layer{}, err
	}
	layer, err := oci.LayerFromDir(path, root, func(rel string) bool {
		for _, p := range baseLayerSkips {
			if strings.HasSuffix(p, "/") && strings.HasPrefix(rel+"/", p) && rel+"/" != p {
				return true // the folder stays, its content goes
			}
			if rel == p {
				return true
			}
		}
		return pkgFiles[rel] || rel == rootfsMarker
	})
	if err != nil {
		return oci.Layer{}, err
	}
	return layer, oci.SaveLayer(layer)
}

func removeBaseLayer(path string) error {
	return errors.Join(ignoreNotExist(os.Remove(path)), ignoreNotExist(os.Remove(path+".digest")))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// dpkgFiles lists the regular files and links dpkg installed for the
// packages the globs name (paths relative to root); a glob that names no
// installed package lists nothing.
func dpkgFiles(root string, globs []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, g := range globs {
		var lists []string
		for _, suffix := range []string{".list", ":amd64.list"} {
			m, err := filepath.Glob(filepath.Join(root, "var/lib/dpkg/info", g+suffix))
			if err != nil {
				return nil, err
			}
			lists = append(lists, m...)
		}
		for _, list := range lists {
			f, err := os.Open(list)
			if err != nil {
				return nil, err
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				rel := strings.TrimPrefix(sc.Text(), "/")
				if fi, err := os.Lstat(filepath.Join(root, rel)); err == nil && !fi.IsDir() {
					out[rel] = true
				}
			}
			f.Close()
			if err := sc.Err(); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// imageSpec is one of the Dockerfile's targets: what it adds over the
// base rootfs and how it starts.
type imageSpec struct {
	Name string
	// Packages the Dockerfile installs for it (all are in the lab rootfs:
	// rootfsPackages), its own and its parent stage's.
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

var imageSpecs = []imageSpec{
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

// ImageNames are the targets `make images` builds, in order.
func ImageNames() []string {
	names := make([]string, len(imageSpecs))
	for i, s := range imageSpecs {
		names[i] = s.Name
	}
	return names
}

// debianPath is the PATH of Debian's base images.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuildImages writes .lab/images/NAME.tar (OCI archive, image
// onepool/NAME:version) for each target, from the rootfs's base layer,
// the binaries in .lab/bin and, from the source tree src, build/slurm's
// scripts and the jail plugin (spank/onepool_jail.so, `make spank`).
func (l *Lab) BuildImages(ctx context.Context, src, version string, targets []string) error {
	base, err := oci.LoadLayer(l.RootFS() + baseLayerSuffix)
	if err != nil {
		return fmt.Errorf("the base image layer (written when the rootfs is built) is missing or broken: %w; "+
			"a rootfs built before it existed needs building again: `make down && rm -rf %s && make images`", err, l.RootFS())
	}
	// Every package an image needs must be in the rootfs it is made of.
	have, err := dpkgInstalled(l.RootFS())
	if err != nil {
		return err
	}
	dir := l.ImageDir()
	layers := filepath.Join(dir, "layers")
	if err := os.MkdirAll(layers, 0o755); err != nil {
		return err
	}
	var common *oci.Layer
	for _, name := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		i := slices.IndexFunc(imageSpecs, func(s imageSpec) bool { return s.Name == name })
		if i < 0 {
			return fmt.Errorf("no image target %q (targets: %s)", name, strings.Join(ImageNames(), " "))
		}
		spec := imageSpecs[i]
		for _, p := range spec.Packages {
			if !have[p] {
				return fmt.Errorf("image %s needs Debian's %s, which the rootfs %s lacks", name, p, l.RootFS())
			}
		}
		ref := "onepool/" + name + ":" + version
		archive := filepath.Join(dir, name+".tar")
		// An archive of this very commit is kept: a clean tree's version
		// names its source exactly (a dirty one always builds again).
		if !strings.HasSuffix(version, "-dirty") {
			if v, err := os.ReadFile(filepath.Join(dir, name+".version")); err == nil && strings.TrimSpace(string(v)) == version {
				if _, err := os.Stat(archive); err == nil {
					fmt.Fprintf(l.cfg.Log, "images: %s is built (%s)\n", ref, archive)
					continue
				}
			}
		}
		start := time.Now()
		imgLayers := []oci.Layer{base}
		if spec.Common {
			if common == nil {
				files := []oci.File{{Name: JailPluginPath, Mode: 0o755, Source: filepath.Join(src, "spank/onepool_jail.so")}}
				for _, s := range slurmCommonScripts {
					files = append(files, oci.File{Name: "usr/local/bin/" + s, Mode: 0o755, Source: filepath.Join(src, "build/slurm", s)})
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
			own = append(own, oci.File{Name: "usr/local/bin/" + spec.Binary, Mode: 0o755, Source: filepath.Join(l.BinDir(), spec.Binary)})
		}
		if spec.Script != "" {
			own = append(own, oci.File{Name: "usr/local/bin/" + spec.Script, Mode: 0o755, Source: filepath.Join(src, "build/slurm", spec.Script)})
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
		fmt.Fprintf(l.cfg.Log, "images: %s -> %s (%d MB, %s)\n", ref, archive, st.Size()>>20, time.Since(start).Round(10*time.Millisecond))
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
