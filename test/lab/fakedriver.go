package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/onepool/onepool/test/lab/mount"
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

// NodeDriverRoot is the fake driver root as the real node (this machine)
// sees it: a driverRoot value for the charts' agents there.
func (l *Lab) NodeDriverRoot() string { return filepath.Join(l.RootFS(), FakeDriverRoot) }

// shareNodeDriverRoot makes NodeDriverRoot a shared mount of its own, as
// the GPU Operator's /run/nvidia/driver is: the runtime refuses a
// HostToContainer mount (the agents' driver-root volume) of a path under a
// private mount, and this machine's / is private. lab down unmounts it
// with the rootfs. Without a Slurm rootfs there is no fake driver.
func (l *Lab) shareNodeDriverRoot(context.Context) error {
	if _, err := os.Stat(filepath.Join(l.RootFS(), "etc/slurm")); err != nil {
		return nil
	}
	if err := writeFakeDriver(l.RootFS()); err != nil {
		return err
	}
	dir := l.NodeDriverRoot()
	if err := mount.Once(dir, dir, "", syscall.MS_BIND); err != nil {
		return err
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}
