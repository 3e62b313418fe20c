package rootfs

import (
	"os"
	"path/filepath"
)

// WriteIfChanged writes body to path (0644, making its folder) unless the
// file holds it already, and says whether it wrote: a daemon reading the
// file must then restart.
func WriteIfChanged(path, body string) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == body {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	return true, os.WriteFile(path, []byte(body), 0o644)
}

// WriteFileAs is WriteIfChanged for a file with its own owner and mode,
// which it also puts right when the content is already right.
func WriteFileAs(path, body string, mode os.FileMode, uid, gid uint32) (bool, error) {
	changed := true
	if old, err := os.ReadFile(path); err == nil && string(old) == body {
		changed = false
	}
	if changed {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return false, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), mode); err != nil {
			return false, err
		}
		if err := os.Chown(tmp, int(uid), int(gid)); err != nil {
			return false, err
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return false, err
		}
		return true, os.Rename(tmp, path)
	}
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		return false, err
	}
	return false, os.Chmod(path, mode)
}
