package rootfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onepool/onepool/test/lab/mount"
)

const (
	debianMirror = "http://deb.debian.org/debian"
	// Marker, in a finished rootfs, holds the package list it was built with.
	Marker = ".onepool-rootfs"
)

// Packages is what the chroot holds. Changing the list installs the
// difference into the existing rootfs on the next `up`.
func Packages() []string {
	return []string{
		"munge", "slurmctld", "slurmd", "slurmrestd", "slurm-client",
		"libslurm-dev", "slurm-wlm-jwt-plugin", "gcc", "libc6-dev", "make",
		// Accounting, which QOS and preemption need.
		"slurmdbd", "mariadb-server", "mariadb-client",
		// The rest of what onepool's images install (the rootfs is their base).
		"ca-certificates",
		// The static shell of the SPANK jail's small rootfs.
		"busybox-static",
		// The real node's container runtime (test/lab/realnode runs these
		// binaries on the host): trixie's containerd 1.7 injects CDI devices,
		// bookworm's 1.6 ignores them.
		"containerd",
	}
}

// Env is the environment of a program run in the chroot.
func Env() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
	}
}

// Builder builds one release's rootfs at Root and checks its packages.
type Builder struct {
	Root    string
	Release Release
	// LogDir receives debootstrap's and apt's output.
	LogDir string
	// Log receives one line per step.
	Log io.Writer
}

// ManifestFile is the list of packages the rootfs was built from, beside it.
func (b Builder) ManifestFile() string { return b.Root + ".manifest" }

// Ensure builds the chroot with Slurm once and reuses it after. Whenever
// it builds or installs, it records the packages the rootfs holds; every
// time, it says which differ from the ones the project last proved.
func (b Builder) Ensure(ctx context.Context) error {
	built, err := b.buildRootFS(ctx)
	if err != nil {
		return err
	}
	if built {
		if err := b.writeManifest(ctx); err != nil {
			return err
		}
	}
	return b.reportDrift(ctx)
}

// buildRootFS builds the rootfs unless it holds the package list already;
// it says whether it changed anything. The rootfs is built in a sibling
// folder and renamed when complete, so a cut-off build never looks finished.
func (b Builder) buildRootFS(ctx context.Context) (bool, error) {
	root := b.Root
	want := strings.Join(Packages(), " ") + "\n"
	have, err := os.ReadFile(filepath.Join(root, Marker))
	if err == nil && string(have) == want {
		return false, nil
	}
	if err == nil { // a rootfs with another package list: add what is missing
		fmt.Fprintln(b.Log, "lab: package list changed; apt-get install into the existing rootfs")
		// The base image layer was this rootfs as Debian made it; now
		// that it holds the lab's setup too, images need a new rootfs.
		if err := RemoveBaseLayer(root + BaseLayerSuffix); err != nil {
			return false, err
		}
		if err := b.aptInstall(ctx, root); err != nil {
			return false, err
		}
		return true, os.WriteFile(filepath.Join(root, Marker), []byte(want), 0o644)
	}
	return true, b.bootstrap(ctx, root, want)
}

// bootstrap makes a new rootfs with debootstrap and apt-get.
func (b Builder) bootstrap(ctx context.Context, root, marker string) error {
	tmp := root + ".tmp"
	if err := mount.UnmountUnder(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := ensureHostDebootstrap(ctx, b.LogDir); err != nil {
		return err
	}
	fmt.Fprintf(b.Log, "lab: debootstrap %s (Slurm %s) into %s (about a minute)\n", b.Release.Suite, b.Release.Name, tmp)
	logPath := filepath.Join(b.LogDir, "debootstrap.log")
	if err := RunLogged(ctx, 15*time.Minute, logPath, "debootstrap", "--variant=minbase", b.Release.Suite, tmp, debianMirror); err != nil {
		return err
	}
	// The users the Dockerfile's images fix before Debian's packages make
	// them, so the rootfs is also the base of onepool's images (images.go).
	for _, argv := range ImageUsers() {
		if err := RunLoggedIn(ctx, time.Minute, logPath, tmp, argv...); err != nil {
			return err
		}
	}
	fmt.Fprintln(b.Log, "lab: apt-get install in the chroot (about a minute)")
	if err := b.aptInstall(ctx, tmp); err != nil {
		return err
	}
	if err := mount.UnmountUnder(tmp); err != nil {
		return err
	}
	// The rootfs as Debian made it, before the lab configures anything in
	// it: the base layer of onepool's images (`make images`).
	start := time.Now()
	layer, err := WriteBaseLayer(tmp, root+BaseLayerSuffix)
	if err != nil {
		return fmt.Errorf("base image layer: %w", err)
	}
	fmt.Fprintf(b.Log, "lab: base image layer %s (%d MB, %s)\n", layer.Path, layer.Size>>20, time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, Marker), []byte(marker), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	return os.Rename(tmp, root)
}

func (b Builder) aptInstall(ctx context.Context, root string) error {
	// apt's /proc goes when it is done: left there, it would be under the
	// chroot's own bind mount of root (mountChroot), which would then find
	// /proc "mounted" and run the daemons with an empty one (slurmd:
	// "_process_cmdline: readlink failed").
	proc := filepath.Join(root, "proc")
	if !mount.IsMounted(proc) {
		if err := mount.Once("proc", proc, "proc", 0); err != nil {
			return err
		}
		defer func() { _ = syscall.Unmount(proc, syscall.MNT_DETACH) }()
	}
	if err := MakeDevices(root); err != nil {
		return err
	}
	// Keep package scripts from starting services inside the chroot.
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/policy-rc.d"), []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		_ = os.WriteFile(filepath.Join(root, "etc/resolv.conf"), b, 0o644)
	}
	logPath := filepath.Join(b.LogDir, "apt.log")
	apt := append([]string{"apt-get"}, b.Release.aptOptions...)
	install := append(slices.Concat(apt, []string{"install", "-y", "--no-install-recommends"}), Packages()...)
	for _, argv := range [][]string{append(slices.Clone(apt), "update"), install} {
		if err := RunLoggedIn(ctx, 15*time.Minute, logPath, root, argv...); err != nil {
			return err
		}
	}
	return nil
}

// ensureHostDebootstrap installs debootstrap on the host from its own
// (bookworm) mirror; only debootstrap itself touches the host.
func ensureHostDebootstrap(ctx context.Context, logDir string) error {
	if _, err := exec.LookPath("debootstrap"); err == nil {
		return nil
	}
	logPath := filepath.Join(logDir, "host-apt.log")
	if err := RunLogged(ctx, 10*time.Minute, logPath, "apt-get", "update"); err != nil {
		return err
	}
	return RunLogged(ctx, 10*time.Minute, logPath, "apt-get", "install", "-y", "--no-install-recommends", "debootstrap")
}

// MakeDevices creates the device nodes the daemons and apt need.
func MakeDevices(root string) error {
	devs := []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	for _, d := range devs {
		if err := MknodChar(filepath.Join(root, "dev", d.name), d.major, d.minor, 0o666); err != nil {
			return err
		}
	}
	return nil
}

// MknodChar makes (or keeps) a character device at path.
func MknodChar(path string, major, minor, mode uint32) error {
	var st syscall.Stat_t
	dev := int((major << 8) | (minor & 0xff) | ((minor &^ 0xff) << 12))
	if err := syscall.Stat(path, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == uint64(dev) {
		return os.Chmod(path, os.FileMode(mode))
	}
	_ = os.Remove(path)
	if err := syscall.Mknod(path, syscall.S_IFCHR|mode, dev); err != nil {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return os.Chmod(path, os.FileMode(mode))
}
