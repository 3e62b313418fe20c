// Package mount is the lab's mounts: what is mounted under a directory
// (from /proc/self/mountinfo), a mount made once, a Slurm chroot's /proc,
// /sys and /dev, and unmounting everything under a directory, deepest first.
package mount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Under returns the mount points at or under dir, deepest first.
func Under(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := Unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// Unescape undoes the octal escapes (\040 for a space) of mountinfo.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsMounted says whether dir is itself a mount point.
func IsMounted(dir string) bool {
	ms, err := Under(dir)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// Once mounts src on dst unless something is mounted there already.
func Once(src, dst, fstype string, flags uintptr) error {
	if IsMounted(dst) {
		return nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(src, dst, fstype, flags, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// Chroot makes root usable as a chroot: root is a mount point of its own
// (mount namespaces made inside need "/" to be one), with proc and sysfs.
// /dev is not bind-mounted: the few device nodes the daemons need are made in
// the rootfs, so nothing of the host's /dev is reachable through the lab dir.
func Chroot(root string) error {
	if err := Once(root, root, "", syscall.MS_BIND); err != nil {
		return err
	}
	if err := Once("proc", filepath.Join(root, "proc"), "proc", 0); err != nil {
		return err
	}
	return Once("sysfs", filepath.Join(root, "sys"), "sysfs", syscall.MS_RDONLY)
}

// UnmountUnder unmounts everything at or under dir, deepest first. A busy
// mount is detached lazily so `down` always finishes.
func UnmountUnder(dir string) error {
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		ms, err := Under(dir)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range ms {
			if err := syscall.Unmount(m, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
				if err2 := syscall.Unmount(m, syscall.MNT_DETACH); err2 != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m, err2))
				}
			}
		}
	}
	if ms, _ := Under(dir); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(ms, ", ")))
	}
	return errors.Join(errs...)
}
