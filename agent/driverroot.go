package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The NVIDIA driver's user-space files a GPU container needs, found under
// the driver's root (the host's / for a driver installed on the host,
// /run/nvidia/driver for the GPU Operator's driver container) and handed to
// the container by the CDI spec, at the paths NVIDIA's CUDA images look in:
// their LD_LIBRARY_PATH holds /usr/local/nvidia/lib64 and their PATH
// /usr/local/nvidia/bin.
const (
	ContainerLibDir = "/usr/local/nvidia/lib64"
	ContainerBinDir = "/usr/local/nvidia/bin"
)

// DriverLibs are the driver's libraries for compute and utility (NVML),
// by soname: what NVIDIA's container toolkit gives a container asking for
// those capabilities. Only the ones the driver has are used; NVML's is
// required.
var DriverLibs = []string{
	"libnvidia-ml.so.1",
	"libcuda.so.1",
	"libcudadebugger.so.1",
	"libnvidia-ptxjitcompiler.so.1",
	"libnvidia-nvvm.so.4",
	"libnvidia-allocator.so.1",
	"libnvidia-cfg.so.1",
	"libnvidia-opencl.so.1",
}

// DriverBins are the driver's tools a container may run.
var DriverBins = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// driverLibDirs are where drivers install their libraries, relative to
// the root: Debian's multiarch directories, then the RPM and runfile ones.
var driverLibDirs = []string{"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "lib64", "usr/lib", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"}

var driverBinDirs = []string{"usr/bin", "bin", "usr/sbin"}

// DriverRoot is where the driver's files are: Host on the node (what a CDI
// spec names; the container runtime reads it there), Dir where this process
// sees the same tree (its mount of Host; Host itself on the host).
type DriverRoot struct {
	Host string
	Dir  string
}

// DriverFile is one driver file for a container: the file on the node and
// where the container sees it.
type DriverFile struct {
	HostPath      string
	ContainerPath string
}

// ErrNoDriverLibs means the driver root holds no libnvidia-ml.so.1.
var ErrNoDriverLibs = errors.New("no libnvidia-ml.so.1 under the driver root")

// NVMLPath is NVML's library as this process sees it ("" when absent).
func (r DriverRoot) NVMLPath() string {
	for _, d := range driverLibDirs {
		p := filepath.Join(r.Dir, d, DriverLibs[0])
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Files finds the driver's libraries and tools. A library is mounted as
// the file its soname link resolves to (inside the root), under its
// soname. Without NVML it fails with ErrNoDriverLibs.
func (r DriverRoot) Files() ([]DriverFile, error) {
	if r.Dir == "" || r.Host == "" {
		return nil, errors.New("driver root: host path and local directory are both required")
	}
	var out []DriverFile
	seen := map[string]bool{}
	for _, name := range DriverLibs {
		for _, d := range driverLibDirs {
			rel, err := r.resolve(path.Join(d, name))
			if err != nil {
				continue
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, DriverFile{HostPath: filepath.Join(r.Host, rel), ContainerPath: path.Join(ContainerLibDir, name)})
			}
			break
		}
	}
	if !seen[DriverLibs[0]] {
		return nil, fmt.Errorf("%w %s (looked in %s)", ErrNoDriverLibs, r.Host, strings.Join(driverLibDirs, ", "))
	}
	for _, name := range DriverBins {
		for _, d := range driverBinDirs {
			rel, err := r.resolve(path.Join(d, name))
			if err != nil {
				continue
			}
			out = append(out, DriverFile{HostPath: filepath.Join(r.Host, rel), ContainerPath: path.Join(ContainerBinDir, name)})
			break
		}
	}
	return out, nil
}

// resolve follows rel's symbolic links inside the root (an absolute link
// target is the root's path, not this process's) to a regular file, and
// returns its path relative to the root.
func (r DriverRoot) resolve(rel string) (string, error) {
	for hops := 0; hops < 16; hops++ {
		p := filepath.Join(r.Dir, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if !fi.Mode().IsRegular() {
				return "", fmt.Errorf("%s is not a regular file", rel)
			}
			return rel, nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			rel = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			rel = path.Join(path.Dir(rel), target)
		}
		if strings.HasPrefix(rel, "../") || rel == ".." {
			return "", fmt.Errorf("%s leads outside the driver root", target)
		}
	}
	return "", errors.New("too many symbolic links")
}
