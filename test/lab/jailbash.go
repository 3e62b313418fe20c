package lab

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
)

// jailLibDir is where the jail keeps the shared libraries copied from the
// rootfs (a directory glibc's loader searches without ld.so.cache).
const jailLibDir = "/usr/lib/x86_64-linux-gnu"

// copyELFInto copies the rootfs's executable bin (an absolute path inside
// root) into jail at the same path, with the shared libraries it needs and
// its program interpreter, so that a dynamically linked tool runs in a jail
// without a distribution: the lab's jail gets bash this way (placeholder
// jobs are bash scripts).
func copyELFInto(root, jail, bin string) error {
	todo := []string{bin}
	done := map[string]bool{}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if done[p] {
			continue
		}
		done[p] = true
		src, err := resolveIn(root, p)
		if err != nil {
			return fmt.Errorf("jail: %s: %w", p, err)
		}
		f, err := elf.Open(src)
		if err != nil {
			return fmt.Errorf("jail: %s: %w", p, err)
		}
		libs, err := f.ImportedLibraries()
		interp := ""
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, rerr := prog.ReadAt(b, 0); rerr == nil && len(b) > 0 {
					interp = string(b[:len(b)-1]) // NUL-terminated
				}
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("jail: %s: %w", p, err)
		}
		dst := filepath.Join(jail, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, dst, 0o755); err != nil {
			return err
		}
		if interp != "" {
			todo = append(todo, interp)
		}
		for _, lib := range libs {
			todo = append(todo, path.Join(jailLibDir, lib))
		}
	}
	return nil
}

// resolveIn follows p's symlinks inside root (absolute targets are root's)
// and returns the host path of the file.
func resolveIn(root, p string) (string, error) {
	for hops := 0; hops < 40; hops++ {
		// Resolve the first symlinked component, if any.
		parts := splitPath(p)
		cur := "/"
		changed := false
		for i, part := range parts {
			next := path.Join(cur, part)
			fi, err := os.Lstat(filepath.Join(root, next))
			if err != nil {
				return "", err
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				cur = next
				continue
			}
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return "", err
			}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			p = path.Join(append([]string{target}, parts[i+1:]...)...)
			changed = true
			break
		}
		if !changed {
			return filepath.Join(root, p), nil
		}
	}
	return "", fmt.Errorf("too many symlinks")
}

func splitPath(p string) []string {
	var parts []string
	for p != "/" && p != "." && p != "" {
		parts = append([]string{path.Base(p)}, parts...)
		p = path.Dir(p)
	}
	return parts
}
