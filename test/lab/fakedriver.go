package lab

import (
	"errors"
	"os"
	"path/filepath"
)

// FakeDriverRoot is the lab's NVIDIA driver root (in the Slurm chroot): the
// files a driver installs, as a driver lays them out (versioned libraries,
// soname links, nvidia-smi), with no driver inside. The node agent's DRA
// driver finds them there (--driver-root) and puts them into every GPU
// container's CDI spec, as it does with a real driver.
const FakeDriverRoot = "/var/lib/fake-nvidia-driver"

// fakeDriverVersion is the version in the fake libraries' file names.
const fakeDriverVersion = "550.54.15"

// writeFakeDriver lays out the fake driver under root (the chroot).
func writeFakeDriver(root string) error {
	dir := filepath.Join(root, FakeDriverRoot)
	lib := filepath.Join(dir, "usr/lib/x86_64-linux-gnu")
	bin := filepath.Join(dir, "usr/bin")
	for _, d := range []string{lib, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, so := range []string{"libnvidia-ml.so", "libcuda.so"} {
		file := so + "." + fakeDriverVersion
		if err := os.WriteFile(filepath.Join(lib, file), []byte("onepool lab: a fake "+so+", no driver inside\n"), 0o644); err != nil {
			return err
		}
		link := filepath.Join(lib, so+".1")
		if cur, err := os.Readlink(link); err == nil && cur == file {
			continue
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(file, link); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte("#!/bin/sh\necho 'onepool lab: fake nvidia-smi, no driver'\n"), 0o755)
}
