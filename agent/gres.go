package agent

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// GPU is one GPU as the agent registers it.
type GPU struct {
	Index     int    `json:"index"`
	Name      string `json:"name"` // NVML's product name, e.g. "NVIDIA H100 80GB HBM3"
	UUID      string `json:"uuid"`
	Minor     int    `json:"minor"`
	MemoryMiB uint64 `json:"memoryMiB"`
	// Device is the character device Slurm confines jobs to. /dev/nvidia<minor>
	// on a real node; the inventory file may point elsewhere (lab fakes).
	Device string `json:"device"`
	// GresType is the GRES type a host's gres.conf gives it (HostGresOrder);
	// empty: the one onepool derives from Name.
	GresType string `json:"gresType,omitempty"`
	// MIG is set when this GRES unit is a MIG device of a partitioned GPU
	// (migUnits); never read from an inventory file (its "migDevices" are).
	MIG *MIG `json:"-"`
}

// Type is the GPU's Slurm GRES type.
func (g GPU) Type() string {
	if g.GresType != "" {
		return g.GresType
	}
	if g.MIG != nil {
		return g.MIG.Profile
	}
	return TypeName(g.Name)
}

// TypeName turns an NVML device name into the GRES type Slurm's own gpu/nvml
// plugin derives from it (gpu_common_underscorify_tolower): every byte
// lowercased the C-locale way and every space made an underscore, nothing
// else. Matching it exactly means a node registered by onepool and one
// autodetected by Slurm ask for the same type, so --gres=gpu:<type>:N works
// across both.
func TypeName(nvmlName string) string {
	b := []byte(nvmlName)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + ('a' - 'A')
		case c == ' ':
			b[i] = '_'
		}
	}
	return string(b)
}

// TypeGroup is the GPUs of one type, sorted by device file (MIG devices of
// one GPU by GPU instance, then compute instance).
type TypeGroup struct {
	Type string
	GPUs []GPU
}

// GroupByType groups GPUs by Slurm type, types in name order and GPUs in
// device-file order. Slurm numbers a node's GRES by their order in gres.conf,
// and that number becomes CUDA_VISIBLE_DEVICES; sorting by device file keeps
// GRES index N on /dev/nvidiaN.
func GroupByType(gpus []GPU) []TypeGroup {
	byType := map[string][]GPU{}
	for _, g := range gpus {
		byType[g.Type()] = append(byType[g.Type()], g)
	}
	groups := make([]TypeGroup, 0, len(byType))
	for t, gs := range byType {
		sort.SliceStable(gs, func(i, j int) bool { return unitLess(gs[i], gs[j]) })
		groups = append(groups, TypeGroup{Type: t, GPUs: gs})
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Type < groups[j].Type })
	return groups
}

// GresOrder is the node's GPUs in the order gres.conf lists them, which is
// the order Slurm numbers them in: GresOrder(gpus)[i] is GRES index i, the
// index `scontrol show job -d` prints as IDX and Slurm's CUDA_VISIBLE_DEVICES
// counts from. The agent's ResourceSlice publishes the same numbers.
func GresOrder(gpus []GPU) []GPU {
	var out []GPU
	for _, g := range GroupByType(gpus) {
		out = append(out, g.GPUs...)
	}
	return out
}

// GresString is the value of Gres= for the node: "gpu:<type>:<count>[,...]",
// empty without GPUs.
func GresString(gpus []GPU) string {
	var parts []string
	for _, g := range GroupByType(gpus) {
		parts = append(parts, fmt.Sprintf("gpu:%s:%d", g.Type, len(g.GPUs)))
	}
	return strings.Join(parts, ",")
}

// GresConf is the node's gres.conf. AutoDetect=off because the agent already
// did what autodetection would, and a slurmd built without NVML support would
// otherwise refuse file-less or unmatched GPUs. No NodeName=: the file is
// this node's own. A MIG device is one line of its own with MultipleFiles=
// (the GPU's device and its two capability devices), as gres.conf(5) asks.
func GresConf(gpus []GPU) string {
	var b strings.Builder
	b.WriteString("# Written by onepool-node-agent at every start; edits are lost.\n")
	b.WriteString("AutoDetect=off\n")
	for _, g := range GroupByType(gpus) {
		var devs []string
		for _, gpu := range g.GPUs {
			if gpu.MIG != nil {
				fmt.Fprintf(&b, "Name=gpu Type=%s MultipleFiles=%s\n", g.Type, strings.Join(append([]string{gpu.Device}, gpu.MIG.Caps...), ","))
				continue
			}
			devs = append(devs, gpu.Device)
		}
		for _, f := range compressFiles(devs) {
			fmt.Fprintf(&b, "Name=gpu Type=%s File=%s\n", g.Type, f)
		}
	}
	return b.String()
}

var trailingNumber = regexp.MustCompile(`^(.*?)([0-9]+)$`)

// splitDevice splits "/dev/nvidia12" into "/dev/nvidia" and 12; ok is false
// when the name does not end in a number.
func splitDevice(dev string) (prefix string, n int, ok bool) {
	m := trailingNumber.FindStringSubmatch(dev)
	if m == nil || (len(m[2]) > 1 && m[2][0] == '0') { // "nvidia01" would not round-trip through a range
		return dev, 0, false
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return dev, 0, false
	}
	return m[1], n, true
}

// unitLess orders GRES units of one type: by device file, then (MIG
// devices of one GPU) by GPU instance and compute instance, which stay
// the same across restarts while the layout does (NVML's MIG device index
// need not).
func unitLess(a, b GPU) bool {
	if a.Device != b.Device || a.MIG == nil || b.MIG == nil {
		return deviceLess(a.Device, b.Device)
	}
	if a.MIG.GI != b.MIG.GI {
		return a.MIG.GI < b.MIG.GI
	}
	return a.MIG.CI < b.MIG.CI
}

func deviceLess(a, b string) bool {
	pa, na, oka := splitDevice(a)
	pb, nb, okb := splitDevice(b)
	if oka && okb && pa == pb {
		return na < nb
	}
	return a < b
}

// compressFiles writes sorted device files as Slurm File= values: a run of
// consecutive numbers with one prefix becomes "prefix[a-b]", anything else
// stays one file per line. Lists like "[0-3,5]" would be valid too, but one
// range per line reads better and keeps each line obviously right.
func compressFiles(devs []string) []string {
	var out []string
	for i := 0; i < len(devs); {
		prefix, first, ok := splitDevice(devs[i])
		j := i + 1
		if ok {
			for j < len(devs) {
				p, n, ok := splitDevice(devs[j])
				if !ok || p != prefix || n != first+(j-i) {
					break
				}
				j++
			}
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s[%d-%d]", prefix, first, first+(j-i)-1))
		} else {
			out = append(out, devs[i])
		}
		i = j
	}
	return out
}

// DefaultDevice is the device file of the GPU with this minor number.
func DefaultDevice(minor int) string { return filepath.Join("/dev", "nvidia"+strconv.Itoa(minor)) }

// NodeConf is what a dynamic node registers with (slurmd -Z --conf).
type NodeConf struct {
	CPUs         int
	RealMemoryMB int64
	Gres         string   // GresString; empty for a CPU node
	Features     []string // validated with ValidateFeatures
	Port         int      // 0: slurm.conf's SlurmdPort
	NodeAddr     string   // "": slurmctld resolves the node's name
}

// String is the --conf value: "CPUs=8 RealMemory=64000 Gres=gpu:x:8 Feature=a,b Port=6818".
func (c NodeConf) String() string {
	s := fmt.Sprintf("CPUs=%d RealMemory=%d", c.CPUs, c.RealMemoryMB)
	if c.Gres != "" {
		s += " Gres=" + c.Gres
	}
	if len(c.Features) > 0 {
		s += " Feature=" + strings.Join(c.Features, ",")
	}
	if c.Port > 0 {
		s += " Port=" + strconv.Itoa(c.Port)
	}
	if c.NodeAddr != "" {
		s += " NodeAddr=" + c.NodeAddr
	}
	return s
}
