package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The Debian mirror serves only the newest version of each package, so a
// rootfs built today may differ from the one the project last proved (this
// is how a MariaDB update broke slurmdbd on fresh machines while warm ones
// stayed green). Pinning is impossible; noticing is not. The lab records
// every package of the rootfs it built (.lab/rootfs.manifest) and compares
// it with the manifest last proven by a passing `make test`
// (test/lab/rootfs/rootfs-<suite>.manifest, compiled into the lab binary).

// keyPackages are the packages `lab status` names.
var keyPackages = []string{"slurmctld", "slurmrestd", "slurmdbd", "munge", "mariadb-server", "libmariadb3", "libc6"}

// manifest maps a package (with its architecture when dpkg gives one) to its version.
type manifest map[string]string

// parseManifest reads "package version" lines; blank lines and # comments are skipped.
func parseManifest(text string) (manifest, error) {
	m := manifest{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("manifest line %d: want \"package version\", got %q", i+1, line)
		}
		if _, dup := m[f[0]]; dup {
			return nil, fmt.Errorf("manifest line %d: package %s listed twice", i+1, f[0])
		}
		m[f[0]] = f[1]
	}
	return m, nil
}

// format writes the manifest sorted by package, under a header.
func (m manifest) format(header string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + line + "\n")
	}
	for _, p := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s %s\n", p, m[p])
	}
	return b.String()
}

// manifestChange is one package that differs between two manifests.
type manifestChange struct {
	pkg, from, to string // from "" = added, to "" = removed
}

func (c manifestChange) String() string {
	switch {
	case c.from == "":
		return fmt.Sprintf("+ %s %s (new)", c.pkg, c.to)
	case c.to == "":
		return fmt.Sprintf("- %s %s (gone)", c.pkg, c.from)
	}
	return fmt.Sprintf("~ %s %s -> %s", c.pkg, c.from, c.to)
}

// diffManifest lists what changed from proven to built, sorted by package.
func diffManifest(proven, built manifest) []manifestChange {
	var out []manifestChange
	for _, p := range slices.Sorted(maps.Keys(proven)) {
		if v, ok := built[p]; !ok {
			out = append(out, manifestChange{pkg: p, from: proven[p]})
		} else if v != proven[p] {
			out = append(out, manifestChange{pkg: p, from: proven[p], to: v})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(built)) {
		if _, ok := proven[p]; !ok {
			out = append(out, manifestChange{pkg: p, to: built[p]})
		}
	}
	slices.SortStableFunc(out, func(a, b manifestChange) int { return strings.Compare(a.pkg, b.pkg) })
	return out
}

// readRootFSPackages asks dpkg in the rootfs what is installed.
func (b Builder) readRootFSPackages(ctx context.Context) (manifest, error) {
	out, err := Output(ctx, time.Minute, b.Root, nil,
		"dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${binary:Package} ${Version}\n")
	if err != nil {
		return nil, fmt.Errorf("list the rootfs's packages: %w", err)
	}
	m := manifest{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// "ii pkg ver": installed; rc (removed, config left) and the like are not.
		if len(f) == 3 && f[0] == "ii" {
			m[f[1]] = f[2]
		}
	}
	if len(m) == 0 {
		return nil, errors.New("list the rootfs's packages: dpkg lists none installed")
	}
	return m, nil
}

// writeManifest records what the rootfs holds now.
func (b Builder) writeManifest(ctx context.Context) error {
	m, err := b.readRootFSPackages(ctx)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("Debian %s packages of the lab's Slurm rootfs (%s), built %s.\n"+
		"Written by the lab; compared on every `lab up` with test/lab/rootfs/%s.",
		b.Release.Suite, b.Root, time.Now().UTC().Format(time.RFC3339), b.Release.ProvenManifestFile())
	tmp := b.ManifestFile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(m.format(header)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, b.ManifestFile())
}

// builtManifest reads .lab/rootfs.manifest, writing it first for a rootfs
// made before the lab kept one.
func (b Builder) builtManifest(ctx context.Context) (manifest, error) {
	text, err := os.ReadFile(b.ManifestFile())
	if errors.Is(err, os.ErrNotExist) {
		if err := b.writeManifest(ctx); err != nil {
			return nil, err
		}
		text, err = os.ReadFile(b.ManifestFile())
	}
	if err != nil {
		return nil, err
	}
	m, err := parseManifest(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.ManifestFile(), err)
	}
	return m, nil
}

// manifestDrift compares the rootfs's manifest with the proven one.
func (b Builder) manifestDrift(ctx context.Context) ([]manifestChange, error) {
	built, err := b.builtManifest(ctx)
	if err != nil {
		return nil, err
	}
	proven, err := parseManifest(b.Release.proven)
	if err != nil {
		return nil, fmt.Errorf("test/lab/rootfs/%s: %w", b.Release.ProvenManifestFile(), err)
	}
	return diffManifest(proven, built), nil
}

// reportDrift says on the lab's log which packages differ from what the
// project last proved. It never fails `up`: the mirror has nothing older to
// give, and the tests will tell whether the new versions work.
func (b Builder) reportDrift(ctx context.Context) error {
	changes, err := b.manifestDrift(ctx)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		return nil
	}
	fmt.Fprintf(b.Log, "lab: the Slurm rootfs differs from the packages last proven (test/lab/rootfs/%s) in %d:\n", b.Release.ProvenManifestFile(), len(changes))
	const show = 40
	for i, c := range changes {
		if i == show {
			fmt.Fprintf(b.Log, "lab:   ... and %d more (diff %s against it)\n", len(changes)-show, b.ManifestFile())
			break
		}
		fmt.Fprintf(b.Log, "lab:   %s\n", c)
	}
	fmt.Fprintln(b.Log, "lab: once `make test` passes on this rootfs, `lab manifest --accept` records it as proven")
	return nil
}

// Status writes the rootfs's key package versions and whether the
// rootfs matches the proven manifest.
func (b Builder) Status(ctx context.Context, w io.Writer) error {
	built, err := b.builtManifest(ctx)
	if err != nil {
		return err
	}
	var key []string
	for _, p := range keyPackages {
		for _, name := range []string{p, p + ":amd64"} {
			if v, ok := built[name]; ok {
				key = append(key, p+" "+v)
				break
			}
		}
	}
	fmt.Fprintf(w, "slurm rootfs     Slurm %s, debian %s, %d packages (%s)\n", b.Release.Name, b.Release.Suite, len(built), b.ManifestFile())
	fmt.Fprintf(w, "                 %s\n", strings.Join(key, ", "))
	changes, err := b.manifestDrift(ctx)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		fmt.Fprintf(w, "                 matches test/lab/rootfs/%s (last proven)\n", b.Release.ProvenManifestFile())
		return nil
	}
	fmt.Fprintf(w, "                 differs from test/lab/rootfs/%s (last proven) in %d packages:\n", b.Release.ProvenManifestFile(), len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "                   %s\n", c)
	}
	return nil
}

// Accept records the rootfs's packages as proven: it writes
// test/lab/rootfs/rootfs-<suite>.manifest in the checkout at top (the lab
// binary embeds it when next built).
func (b Builder) Accept(ctx context.Context, top string) (string, error) {
	built, err := b.builtManifest(ctx)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(top, "test", "lab", "rootfs", b.Release.ProvenManifestFile())
	header := fmt.Sprintf("Debian %s packages of the lab's Slurm rootfs last proven by `make test`.\n"+
		"`lab up` prints how a newly built rootfs differs from this list; after a passing\n"+
		"`make test` on a new rootfs, `lab manifest --accept` rewrites it.", b.Release.Suite)
	return dst, os.WriteFile(dst, []byte(built.format(header)), 0o644)
}
