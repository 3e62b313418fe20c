package agent

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/onepool/onepool/slurmrest/model"
)

// A node whose slurmd runs on the host (systemd, an existing Slurm
// cluster) numbers its GPUs from the host's own gres.conf, not from one the
// agent writes. The DRA driver must publish the same numbers, so it reads
// that gres.conf the way slurmd does.
//
// slurmd's order, read from `slurmd -G` on 24.11 and 26.05 (the e2e
// TestHostGresOrderIsSlurmds checks it on the lab's slurmd): the types in
// the order the node's Gres= in slurm.conf names them, and within a type
// the gres.conf lines in file order, each line's File= expanded as written
// (File=/dev/nvidia[4-5] is 4 then 5). GRES index i is the i-th file of
// that list.

// ErrGresConf means the host's gres.conf cannot be read the way slurmd reads
// it, or does not match the GPUs found; nothing is published.
var ErrGresConf = errors.New("host gres.conf")

// GresLine is one Name=gpu line of a host's gres.conf that applies to a
// node: its Type= ("" none) and its File= expanded.
type GresLine struct {
	Type  string
	Files []string
}

// ParseGresConf reads a host's gres.conf for node: its gpu lines, in file
// order. Lines of other GRES and of other nodes are skipped. What the agent
// cannot follow is an error naming it: AutoDetect other than off (slurmd
// then merges NVML's order in), a gpu line without File=, Include.
func ParseGresConf(conf, node string) ([]GresLine, error) {
	var out []GresLine
	sc := bufio.NewScanner(strings.NewReader(conf))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.EqualFold(fields[0], "include") {
			return nil, fmt.Errorf("%w: line %d: Include is not followed: list each gpu line in this file", ErrGresConf, n)
		}
		kv := map[string]string{}
		for _, f := range fields {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("%w: line %d: %q is not key=value", ErrGresConf, n, f)
			}
			kv[strings.ToLower(k)] = strings.Trim(v, `"'`)
		}
		if nodes, ok := kv["nodename"]; ok {
			names, err := model.ExpandHostlist(nodes)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: NodeName=%s: %w", ErrGresConf, n, nodes, err)
			}
			if !slices.Contains(names, node) {
				continue
			}
		}
		if ad, ok := kv["autodetect"]; ok && !strings.EqualFold(ad, "off") {
			return nil, fmt.Errorf("%w: line %d: AutoDetect=%s: slurmd then orders the GPUs as NVML finds them, which onepool does not reproduce; set AutoDetect=off and list each GPU's File=", ErrGresConf, n, ad)
		}
		if !strings.EqualFold(kv["name"], "gpu") {
			continue
		}
		file, ok := kv["file"]
		if !ok {
			return nil, fmt.Errorf("%w: line %d: a gpu line without File=: onepool maps each GRES index to its device file", ErrGresConf, n)
		}
		files, err := model.ExpandHostlist(file)
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("%w: line %d: File=%s: %v", ErrGresConf, n, file, err)
		}
		out = append(out, GresLine{Type: kv["type"], Files: files})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGresConf, err)
	}
	return out, nil
}

// NodeGresTypes is the gpu types of a node's Gres= ("gpu:h100:4,gpu:a100:2"
// or, as scontrol shows it, "gpu:h100:4(S:0-1)"), in its order; "" for an
// untyped "gpu:4".
func NodeGresTypes(gres string) []string {
	var out []string
	for _, t := range model.GPUTypes(gres) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// HostGresOrder is the node's GPUs in the order slurmd numbers them from
// the host's gres.conf lines and the node's Gres= types (above): element
// i is GRES index i, its GresType set to the line's Type=. Every file a
// line lists must be a GPU found, and every GPU found listed once.
func HostGresOrder(gpus []GPU, lines []GresLine, types []string) ([]GPU, error) {
	byDevice := map[string]GPU{}
	for _, g := range gpus {
		byDevice[g.Device] = g
	}
	if len(types) == 0 {
		types = []string{""}
	}
	var out []GPU
	used := map[string]bool{}
	for _, t := range types {
		for _, l := range lines {
			if l.Type != t && t != "" {
				continue
			}
			for _, f := range l.Files {
				g, ok := byDevice[f]
				if !ok {
					return nil, fmt.Errorf("%w: File=%s names no GPU the agent found (found: %s)", ErrGresConf, f, devices(gpus))
				}
				if used[f] {
					return nil, fmt.Errorf("%w: File=%s is listed twice", ErrGresConf, f)
				}
				used[f] = true
				if l.Type != "" {
					g.GresType = l.Type
				}
				out = append(out, g)
			}
		}
	}
	for _, l := range lines {
		if l.Type != "" && !slices.Contains(types, l.Type) && !slices.Contains(types, "") {
			return nil, fmt.Errorf("%w: Type=%s is not in the node's Gres= in slurm.conf (types: %s)", ErrGresConf, l.Type, strings.Join(types, ", "))
		}
	}
	if len(out) != len(gpus) {
		var missing []string
		for _, g := range gpus {
			if !used[g.Device] {
				missing = append(missing, g.Device)
			}
		}
		return nil, fmt.Errorf("%w: the agent found GPUs gres.conf does not list for this node: %s", ErrGresConf, strings.Join(missing, ", "))
	}
	return out, nil
}

func devices(gpus []GPU) string {
	ds := make([]string, 0, len(gpus))
	for _, g := range gpus {
		ds = append(ds, g.Device)
	}
	if len(ds) == 0 {
		return "none"
	}
	return strings.Join(ds, ", ")
}

// ShowNodeGres is the Gres= of `scontrol show node NAME`'s answer; ok is
// false when it has none (a node without GRES, or not a node's record).
func ShowNodeGres(out string) (gres string, ok bool) {
	for _, f := range strings.Fields(out) {
		if v, found := strings.CutPrefix(f, "Gres="); found {
			if v == "(null)" {
				return "", false
			}
			return v, true
		}
	}
	return "", false
}

// GresConfTypes is the distinct Type= of lines, in order of first use.
func GresConfTypes(lines []GresLine) []string {
	var out []string
	for _, l := range lines {
		if !slices.Contains(out, l.Type) {
			out = append(out, l.Type)
		}
	}
	return out
}
