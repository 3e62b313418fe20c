package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	rootfsMarker = ".onepool-rootfs"
)

// rootfsPackages is what the chroot holds. Changing the list installs the
// difference into the existing rootfs on the next `up`.
var rootfsPackages = []string{
	"munge", "slurmctld", "slurmd", "slurmrestd", "slurm-client",
	"libslurm-dev", "slurm-wlm-jwt-plugin", "gcc", "libc6-dev", "make",
	// Accounting, which QOS and preemption need.
	"slurmdbd", "mariadb-server", "mariadb-client",
	// The rest of what onepool's images install (the rootfs is their base).
	"ca-certificates",
	// The static shell of the SPANK jail's small rootfs.
	"busybox-static",
	// The real node's container runtime (test/lab/node.go runs these
	// binaries on the host): trixie's containerd 1.7 injects CDI devices,
	// bookworm's 1.6 ignores them.
	"containerd",
}

var chrootEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
}

// ensureRootFS builds the trixie chroot with Slurm once and reuses it after.
// Whenever it builds or installs, it records the packages the rootfs holds;
// every time, it says which differ from the ones the project last proved.
func (l *Lab) ensureRootFS(ctx context.Context) error {
	built, err := l.buildRootFS(ctx)
	if err != nil {
		return err
	}
	if built {
		if err := l.writeManifest(ctx); err != nil {
			return err
		}
	}
	return l.reportDrift(ctx)
}

// buildRootFS builds the rootfs unless it holds the package list already;
// it says whether it changed anything. The rootfs is built in a sibling
// folder and renamed when complete, so a cut-off build never looks finished.
func (l *Lab) buildRootFS(ctx context.Context) (bool, error) {
	root := l.RootFS()
	want := strings.Join(rootfsPackages, " ") + "\n"
	have, err := os.ReadFile(filepath.Join(root, rootfsMarker))
	if err == nil && string(have) == want {
		return false, nil
	}
	if err == nil { // a rootfs with another package list: add what is missing
		fmt.Fprintln(l.cfg.Log, "lab: package list changed; apt-get install into the existing rootfs")
		// The base image layer was this rootfs as Debian made it; now
		// that it holds the lab's setup too, images need a new rootfs.
		if err := removeBaseLayer(root + baseLayerSuffix); err != nil {
			return false, err
		}
		if err := l.aptInstall(ctx, root); err != nil {
			return false, err
		}
		return true, os.WriteFile(filepath.Join(root, rootfsMarker), []byte(want), 0o644)
	}
	return true, l.bootstrap(ctx, root, want)
}

// bootstrap makes a new rootfs with debootstrap and apt-get.
func (l *Lab) bootstrap(ctx context.Context, root, marker string) error {
	tmp := root + ".tmp"
	if err := mount.UnmountUnder(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := ensureHostDebootstrap(ctx, l.LogDir()); err != nil {
		return err
	}
	fmt.Fprintf(l.cfg.Log, "lab: debootstrap %s (Slurm %s) into %s (about a minute)\n", l.cfg.Slurm.Suite, l.cfg.Slurm.Name, tmp)
	logPath := filepath.Join(l.LogDir(), "debootstrap.log")
	if err := runLogged(ctx, 15*time.Minute, logPath, "debootstrap", "--variant=minbase", l.cfg.Slurm.Suite, tmp, debianMirror); err != nil {
		return err
	}
	// The users the Dockerfile's images fix before Debian's packages make
	// them, so the rootfs is also the base of onepool's images (images.go).
	for _, argv := range imageUsers {
		if err := runLoggedIn(ctx, time.Minute, logPath, tmp, argv...); err != nil {
			return err
		}
	}
	fmt.Fprintln(l.cfg.Log, "lab: apt-get install in the chroot (about a minute)")
	if err := l.aptInstall(ctx, tmp); err != nil {
		return err
	}
	if err := mount.UnmountUnder(tmp); err != nil {
		return err
	}
	// The rootfs as Debian made it, before the lab configures anything in
	// it: the base layer of onepool's images (`make images`).
	start := time.Now()
	layer, err := writeBaseLayer(tmp, root+baseLayerSuffix)
	if err != nil {
		return fmt.Errorf("base image layer: %w", err)
	}
	fmt.Fprintf(l.cfg.Log, "lab: base image layer %s (%d MB, %s)\n", layer.Path, layer.Size>>20, time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, rootfsMarker), []byte(marker), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	return os.Rename(tmp, root)
}

func (l *Lab) aptInstall(ctx context.Context, root string) error {
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
	if err := makeDevices(root); err != nil {
		return err
	}
	// Keep package scripts from starting services inside the chroot.
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/policy-rc.d"), []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return err
	}
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		_ = os.WriteFile(filepath.Join(root, "etc/resolv.conf"), b, 0o644)
	}
	logPath := filepath.Join(l.LogDir(), "apt.log")
	apt := append([]string{"apt-get"}, l.cfg.Slurm.aptOptions...)
	install := append(slices.Concat(apt, []string{"install", "-y", "--no-install-recommends"}), rootfsPackages...)
	for _, argv := range [][]string{append(slices.Clone(apt), "update"), install} {
		if err := runLoggedIn(ctx, 15*time.Minute, logPath, root, argv...); err != nil {
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
	if err := runLogged(ctx, 10*time.Minute, logPath, "apt-get", "update"); err != nil {
		return err
	}
	return runLogged(ctx, 10*time.Minute, logPath, "apt-get", "install", "-y", "--no-install-recommends", "debootstrap")
}

// makeDevices creates the device nodes the daemons and apt need.
func makeDevices(root string) error {
	devs := []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	for _, d := range devs {
		if err := mknodChar(filepath.Join(root, "dev", d.name), d.major, d.minor, 0o666); err != nil {
			return err
		}
	}
	return nil
}

func mknodChar(path string, major, minor, mode uint32) error {
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

// runLogged runs a host command with a deadline, its output appended to logPath.
func runLogged(ctx context.Context, timeout time.Duration, logPath string, argv ...string) error {
	return runLoggedIn(ctx, timeout, logPath, "", argv...)
}

// runLoggedIn runs argv inside chroot root (or on the host when root is "").
func runLoggedIn(ctx context.Context, timeout time.Duration, logPath, root string, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	prog := argv[0]
	if root != "" {
		if prog, err = chrootLookPath(root, argv[0]); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, prog, argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if root != "" {
		cmd.Env = chrootEnv
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	} else {
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fmt.Errorf("%s failed: %w (log: %s)", strings.Join(argv, " "), err, logPath)
	}
	return nil
}

// chrootOutput runs argv inside root and returns its stdout; stderr goes into the error.
func chrootOutput(ctx context.Context, timeout time.Duration, root string, env []string, argv ...string) ([]byte, error) {
	return chrootOutputStdin(ctx, timeout, root, env, "", argv...)
}

// chrootOutputStdin is chrootOutput with stdin (for what must not show in argv).
func chrootOutputStdin(ctx context.Context, timeout time.Duration, root string, env []string, stdin string, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path, err := chrootLookPath(root, argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Path = path
	cmd.Env = append(append([]string{}, chrootEnv...), env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %s: %w", timeout, ctx.Err())
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func chrootLookPath(root, prog string) (string, error) {
	if strings.HasPrefix(prog, "/") {
		return prog, nil
	}
	for _, dir := range []string{"/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if st, err := os.Stat(filepath.Join(root, dir, prog)); err == nil && !st.IsDir() {
			return filepath.Join(dir, prog), nil
		}
	}
	return "", errors.New(prog + ": not found in the lab rootfs")
}
