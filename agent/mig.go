package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/onepool/onepool/slurmrest/model"
)

// MIG (Multi-Instance GPU): a GPU with MIG mode on is never a GRES of its
// own. Each of its MIG devices (a compute instance inside a GPU instance)
// is one GRES unit of the GPU's "gpu" GRES, typed by its profile
// (Type=1g.10gb), with the files a job needs to use it: the GPU's device
// and the capability devices of its GPU instance and compute instance
// (/dev/nvidia-caps/nvidia-cap<N>, N from the kernel's mig-minors). This is
// what Slurm's own gpu/nvml autodetection registers, except the type name
// (see MIGType).

// Where the NVIDIA kernel driver lists the capability minors of every
// possible GPU and compute instance ("gpu0/gi1/access 12"), and where the
// capability device nodes live.
const (
	DefaultMIGMinors = "/proc/driver/nvidia-caps/mig-minors"
	DefaultCapsDir   = "/dev/nvidia-caps"
)

// MIGDevice is one MIG device as a Library reports it.
type MIGDevice struct {
	UUID string `json:"uuid"` // NVML's MIG UUID, MIG-<uuid>
	// Name is NVML's device name of the MIG device, e.g. "NVIDIA H100
	// 80GB HBM3 MIG 1g.10gb"; the profile is read from it.
	Name      string `json:"name"`
	GI        int    `json:"gi"`     // GPU instance id
	CI        int    `json:"ci"`     // compute instance id within the GPU instance
	Slices    int    `json:"slices"` // GPU instance slices (the "1" of 1g.10gb)
	MemoryMiB uint64 `json:"memoryMiB"`
	// Caps are the GPU instance's and compute instance's capability
	// device files, in that order.
	Caps []string `json:"caps"`
}

// MIG is set on a GPU (a GRES unit) that is a MIG device of a
// partitioned GPU; the GPU's Index, Minor and Device are its parent's.
type MIG struct {
	ParentUUID string
	// ParentMemoryMiB is the partitioned GPU's whole memory (0: NVML did
	// not say); the DRA driver's counter of that GPU.
	ParentMemoryMiB uint64
	GI, CI          int
	Profile         string // MIGType: the GRES type, e.g. 1g.10gb
	Caps            []string
}

// MIGType is the GRES type of a MIG device: its profile as NVIDIA names it
// (nvidia-smi, the device plugin's nvidia.com/mig-<profile>), read from the
// MIG device's NVML name after "MIG " ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"
// → 1g.10gb), lowercased, '+' made '_' (1g.10gb+me → 1g.10gb_me: Slurm's
// --gres syntax and a DNS label both stay plain). A name without "MIG " is
// Slurm's own formula: <slices>g.<memory in GB, rounded>gb. Slurm's
// autodetection prefixes the GPU's name (nvidia_h100_80gb_hbm3_1g.10gb);
// the profile alone is what users and Kubernetes ask for (--gres=gpu:1g.10gb:1).
func MIGType(name string, slices int, memMiB uint64) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 && strings.TrimSpace(name[i+4:]) != "" {
		return model.MIGProfileType(name[i+4:])
	}
	return fmt.Sprintf("%dg.%dgb", slices, int(math.Round(float64(memMiB)/1024)))
}

// ErrMIGNoInstances means MIG mode is on but the GPU has no MIG device; it can
// run nothing (CUDA cannot use a MIG-enabled GPU as a whole) and is not
// registered as a whole GPU either.
var ErrMIGNoInstances = errors.New("MIG mode is on but the GPU has no MIG devices: create the instances (nvidia-smi mig -cgi ... -C) or turn MIG off")

// migUnits is the GRES units of one GPU: itself, or, with MIG on, one per
// MIG device, each carrying its parent's index, minor and device file.
func migUnits(g GPU, migs []MIGDevice) ([]GPU, error) {
	if migs == nil {
		return []GPU{g}, nil
	}
	if len(migs) == 0 {
		return nil, ErrMIGNoInstances
	}
	out := make([]GPU, 0, len(migs))
	seen := map[[2]int]bool{}
	for _, m := range migs {
		if m.UUID == "" {
			return nil, fmt.Errorf("MIG device gi=%d ci=%d: empty UUID", m.GI, m.CI)
		}
		if seen[[2]int{m.GI, m.CI}] {
			return nil, fmt.Errorf("MIG device gi=%d ci=%d listed twice", m.GI, m.CI)
		}
		seen[[2]int{m.GI, m.CI}] = true
		if len(m.Caps) != 2 {
			return nil, fmt.Errorf("MIG device %s (gi=%d ci=%d): %d capability files, want the GPU instance's and the compute instance's", m.UUID, m.GI, m.CI, len(m.Caps))
		}
		u := g
		u.UUID = m.UUID
		u.MemoryMiB = m.MemoryMiB
		u.MIG = &MIG{ParentUUID: g.UUID, ParentMemoryMiB: g.MemoryMiB, GI: m.GI, CI: m.CI, Profile: MIGType(m.Name, m.Slices, m.MemoryMiB), Caps: m.Caps}
		out = append(out, u)
	}
	return out, nil
}

// PhysicalGPUs is how many GPUs the units are on (a partitioned GPU is one
// however many MIG devices it has): what --expected-gpus counts.
func PhysicalGPUs(units []GPU) int {
	seen := map[int]bool{}
	for _, g := range units {
		seen[g.Index] = true
	}
	return len(seen)
}

// MIGMinors is the kernel's table of capability minors, by entry name
// ("gpu0/gi1/access", "gpu0/gi1/ci0/access").
type MIGMinors map[string]int

// ParseMIGMinors reads /proc/driver/nvidia-caps/mig-minors: lines of
// "<name> <minor>" (the driver also lists config and monitor entries).
func ParseMIGMinors(r io.Reader) (MIGMinors, error) {
	out := MIGMinors{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("mig-minors line %d: %q: want <name> <minor>", line, sc.Text())
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("mig-minors line %d: %q: minor is not a number", line, sc.Text())
		}
		out[f[0]] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mig-minors: %w", err)
	}
	return out, nil
}

// ReadMIGMinors is ParseMIGMinors of a file.
func ReadMIGMinors(path string) (MIGMinors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("MIG capability minors: %w", err)
	}
	defer f.Close()
	m, err := ParseMIGMinors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Caps is the capability device files of the MIG device gi/ci of the GPU
// with this minor number, in capsDir: the GPU instance's access file, then
// the compute instance's. The kernel names the GPU by its minor number
// (gpu<minor>/gi<gi>/access), as NVIDIA's container toolkit reads it.
func (m MIGMinors) Caps(capsDir string, gpuMinor, gi, ci int) ([]string, error) {
	var out []string
	for _, name := range []string{
		fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi),
		fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci),
	} {
		n, ok := m[name]
		if !ok {
			return nil, fmt.Errorf("MIG capability minors: no entry %s", name)
		}
		out = append(out, filepath.Join(capsDir, "nvidia-cap"+strconv.Itoa(n)))
	}
	return out, nil
}
