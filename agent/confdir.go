package agent

import (
	"fmt"
	"os"
	"path/filepath"
)

const gresConfName = "gres.conf"

// WriteFileAtomic writes through a temp file and rename, so slurmd (or a
// health check) never reads a half-written file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil { // CreateTemp makes 0600
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// prepareConfDir makes confDir a copy of slurmConfDir by symlinks, minus
// gres.conf, which is the node's own. slurmd reads gres.conf from next to
// slurm.conf, so several slurmd sharing one /etc/slurm (the lab, or a
// read-only ConfigMap mount) each get their own gres.conf this way while
// every other file stays the shared one.
func prepareConfDir(slurmConfDir, confDir string) error {
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return fmt.Errorf("conf dir: %w", err)
	}
	entries, err := os.ReadDir(slurmConfDir)
	if err != nil {
		return fmt.Errorf("slurm conf dir: %w", err)
	}
	src, err := filepath.Abs(slurmConfDir)
	if err != nil {
		return fmt.Errorf("slurm conf dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() == gresConfName {
			continue
		}
		target := filepath.Join(src, e.Name())
		link := filepath.Join(confDir, e.Name())
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		// Link under a temp name and rename over: replaces a stale link
		// or file without a moment where the name is missing.
		tmp := filepath.Join(confDir, "."+e.Name()+".onepool-link")
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return fmt.Errorf("conf dir: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("conf dir: %w", err)
		}
	}
	return nil
}
