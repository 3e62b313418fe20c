package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/onepool/onepool/test/lab/slurmconf"

	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// JailRoot is the lab's shared jail, as slurmd (in the Slurm chroot) sees it.
// All lab nodes run on one host, so one directory is "shared storage".
const JailRoot = "/var/lib/onepool/jail"

// JailMarker is a file only the jail has: a step that sees it runs in the jail.
const JailMarker = "/etc/onepool-jail-marker"

// JailUser is an ordinary user that exists in the rootfs and in the jail; its
// home directory exists only in the jail.
const JailUser = "alice"

const jailUID = 2001

// jailPluginConf is the plugstack.conf.d file that turns the jail plugin on.
const jailPluginConf = "etc/slurm/plugstack.conf.d/onepool-jail.conf"

// JailPluginPath is where the plugin is installed, as slurmd sees it.
const JailPluginPath = slurmconf.JailPluginPath

// busyboxApplets are the commands the lab's jail offers (one static busybox).
var busyboxApplets = []string{
	"sh", "cat", "ls", "hostname", "touch", "mkdir", "echo", "stat", "grep",
	"pwd", "id", "sleep", "test", "wc", "rm", "env", "readlink", "true",
	"false", "head", "tail", "uname", "date", "ps", "df", "whoami",
}

// JailHostPath is path inside the jail as seen from this host.
func (l *Lab) JailHostPath(path string) string {
	return filepath.Join(l.RootFS(), JailRoot, path)
}

// ensureJail builds the lab's small jail rootfs: a static busybox, bash, the
// rootfs's users, a marker, and the usual top-level directories. It is
// cheap, so every `up` refreshes it; what jobs wrote in it stays.
func (l *Lab) ensureJail(ctx context.Context) error {
	root := l.RootFS()
	// A lab comes up with the plugin off; tests that need it turn it on.
	if err := l.RemoveJailPlugin(); err != nil {
		return err
	}
	jail := filepath.Join(root, JailRoot)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{"usr/bin", 0o755}, {"etc", 0o755}, {"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555},
		{"run", 0o755}, {"tmp", os.ModeSticky | 0o777}, {"var/spool/slurmd", 0o755}, {"home", 0o755}, {"shared", os.ModeSticky | 0o777},
	} {
		p := filepath.Join(jail, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	home := filepath.Join(jail, "home", JailUser)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	if err := os.Chown(home, jailUID, jailUID); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(root, "usr/bin/busybox"), filepath.Join(jail, "usr/bin/busybox"), 0o755); err != nil {
		return fmt.Errorf("jail busybox (package busybox-static in the rootfs): %w", err)
	}
	for _, a := range busyboxApplets {
		p := filepath.Join(jail, "usr/bin", a)
		if target, err := os.Readlink(p); err == nil && target == "busybox" {
			continue
		}
		_ = os.Remove(p)
		if err := os.Symlink("busybox", p); err != nil {
			return err
		}
	}
	if err := copyELFInto(root, jail, "/usr/bin/bash"); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(jail, "bin")); os.IsNotExist(err) {
		if err := os.Symlink("usr/bin", filepath.Join(jail, "bin")); err != nil {
			return err
		}
	}
	for _, f := range []string{"etc/passwd", "etc/group", "etc/hosts"} {
		if err := copyFile(filepath.Join(root, f), filepath.Join(jail, f), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(jail, JailMarker), []byte("onepool lab jail\n"), 0o644); err != nil {
		return err
	}
	// /home is shared storage, mounted on every node as well as seen in the
	// jail: Slurm opens -o/-e files and first enters the working directory
	// on the node, before the plugin runs.
	return mount.Once(filepath.Join(jail, "home"), filepath.Join(root, "home"), "", syscall.MS_BIND)
}

// ensureJailUser adds the lab's ordinary user to the Slurm rootfs.
func (l *Lab) ensureJailUser(ctx context.Context) error {
	if _, _, err := l.chrootUser(JailUser); err == nil {
		return nil
	}
	return rootfs.RunLoggedIn(ctx, time.Minute, filepath.Join(l.LogDir(), "setup.log"), l.RootFS(),
		"useradd", "--uid", fmt.Sprint(jailUID), "--user-group", "--no-create-home",
		"--home-dir", "/home/"+JailUser, "--shell", "/bin/sh", JailUser)
}

// InstallJailPlugin installs the SPANK plugin built at so and turns it on with
// args; the next job step loads it (slurmd needs no restart).
func (l *Lab) InstallJailPlugin(so string, args ...string) error {
	root := l.RootFS()
	// copyFile renames a new file over the old one: running slurmstepds
	// keep the copy they mapped.
	if err := copyFile(so, filepath.Join(root, JailPluginPath), 0o755); err != nil {
		return err
	}
	// By name, as the slurm chart writes it: Slurm finds it in PluginDir.
	line := fmt.Sprintf("required %s %s\n", filepath.Base(JailPluginPath), strings.Join(args, " "))
	conf := filepath.Join(root, jailPluginConf)
	if err := os.WriteFile(conf+".new", []byte(line), 0o644); err != nil {
		return err
	}
	return os.Rename(conf+".new", conf)
}

// RemoveJailPlugin turns the plugin off again.
func (l *Lab) RemoveJailPlugin() error {
	err := os.Remove(filepath.Join(l.RootFS(), jailPluginConf))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// copyFile copies src to dst with mode through a rename, so a reader (or a
// process running dst) never sees a half-written file.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Chmod(dst+".tmp", mode); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// SlurmdLog is node's slurmd log file (slurmstepd writes there too).
func (l *Lab) SlurmdLog(node string) string {
	return filepath.Join(l.RootFS(), "var/log/onepool", "slurmd-"+node+".log")
}

// JailPluginBuild is where `make lab-spank` builds the jail plugin for this
// lab, against its own release's headers (two labs of two releases may
// run at once: each needs its own build).
func (l *Lab) JailPluginBuild() string { return l.path("onepool_jail.so") }
