package model

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrNoGPUIndexes means Slurm's answer names no GPU indices for the job on that
// node (no GPUs there, or an answer without GRES detail).
var ErrNoGPUIndexes = errors.New("Slurm gave no GPU indices")

// GPUIndexes is the job's GPU GRES indices on node, read from GresDetail
// ("gpu:h100:2(IDX:0-1)", "gpu:2(IDX:0,3)", several types joined by
// commas). The indices are Slurm's numbering of the node's GPUs (the order
// of its gres.conf). The count before IDX must match the indices found.
func (j *Job) GPUIndexes(node string) ([]int, error) {
	detail, ok := j.GresDetail[node]
	if !ok || detail == "" {
		return nil, fmt.Errorf("job %d on %s: %w", j.ID, node, ErrNoGPUIndexes)
	}
	idx, err := ParseGresDetail(detail)
	if err != nil {
		return nil, fmt.Errorf("job %d on %s: %w", j.ID, node, err)
	}
	if len(idx) == 0 {
		return nil, fmt.Errorf("job %d on %s: %q: %w", j.ID, node, detail, ErrNoGPUIndexes)
	}
	return idx, nil
}

// ParseGresDetail reads the gpu entries of one node's GRES detail.
func ParseGresDetail(detail string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, entry := range splitOutsideParens(detail) {
		name, rest, _ := strings.Cut(entry, ":")
		if name != "gpu" && !strings.HasPrefix(entry, "gpu(") {
			continue
		}
		open := strings.Index(entry, "(IDX:")
		if open < 0 || !strings.HasSuffix(entry, ")") {
			return nil, fmt.Errorf("GRES detail %q: no (IDX:...)", entry)
		}
		head := entry[:open]
		list := entry[open+len("(IDX:") : len(entry)-1]
		// The count is the last ':' field of the head when it is a number.
		count := -1
		if i := strings.LastIndex(head, ":"); i >= 0 && rest != "" {
			if n, err := strconv.Atoi(head[i+1:]); err == nil {
				count = n
			}
		}
		// A job that asked untyped GPUs on a node of several types has an
		// entry per type, those it got none of with count 0:
		// "gpu:a100:2(IDX:0-1),gpu:h100:0(IDX:)".
		if count == 0 && (list == "" || list == "N/A") {
			continue
		}
		idx, err := parseIndexList(list)
		if err != nil {
			return nil, fmt.Errorf("GRES detail %q: %w", entry, err)
		}
		if count >= 0 && count != len(idx) {
			return nil, fmt.Errorf("GRES detail %q: count %d but %d indices", entry, count, len(idx))
		}
		for _, i := range idx {
			if seen[i] {
				return nil, fmt.Errorf("GRES detail %q: index %d twice", detail, i)
			}
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}

// parseIndexList reads "0-1,3,5-6".
func parseIndexList(list string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad index %q", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1024 {
				return nil, fmt.Errorf("bad index range %q", part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

func splitOutsideParens(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// ShowJobGPUIndexes reads the job's GPU GRES indices on node from what
// `scontrol show job -d <id>` prints: a line per group of nodes with the
// same allocation, "Nodes=gpu-[0-1] CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:0-1)".
// A node the job does not run on is an error wrapping ErrNoGPUIndexes.
func ShowJobGPUIndexes(out, node string) ([]int, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "Nodes=") {
			continue
		}
		names, err := ExpandHostlist(strings.TrimPrefix(f[0], "Nodes="))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(names, node) {
			continue
		}
		for _, kv := range f[1:] {
			if detail, ok := strings.CutPrefix(kv, "GRES="); ok {
				idx, err := ParseGresDetail(detail)
				if err != nil {
					return nil, err
				}
				if len(idx) == 0 {
					break
				}
				return idx, nil
			}
		}
		return nil, fmt.Errorf("node %s: %w", node, ErrNoGPUIndexes)
	}
	return nil, fmt.Errorf("node %s is not the job's: %w", node, ErrNoGPUIndexes)
}

// GPUTypes is the GRES type of each GPU index of a node's Gres=
// ("gpu:h100:4,gpu:a100:2(S:0)": four "h100" then two "a100"; "" for an
// untyped "gpu:4"): Slurm numbers a node's GPUs type by type, in the
// order Gres= names the types.
func GPUTypes(gres string) []string {
	var out []string
	for _, g := range strings.Split(gres, ",") {
		g, _, _ = strings.Cut(g, "(")
		parts := strings.Split(g, ":")
		if parts[0] != "gpu" || len(parts) < 2 || len(parts) > 3 {
			continue
		}
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil || n < 0 {
			continue
		}
		t := ""
		if len(parts) == 3 {
			t = parts[1]
		}
		for range n {
			out = append(out, t)
		}
	}
	return out
}

// MIGProfileType is the GRES type of a MIG profile as NVIDIA names it
// (nvidia-smi, the device plugin's nvidia.com/mig-<profile>): lowercased,
// '+' and ' ' made '_' (1g.18gb+me → 1g.18gb_me), so that it stays one
// word of Slurm's --gres syntax. The node agent registers MIG devices with
// it and the webhook asks it for nvidia.com/mig-<profile>.
func MIGProfileType(profile string) string {
	return strings.NewReplacer("+", "_", " ", "_").Replace(strings.ToLower(strings.TrimSpace(profile)))
}

// gresType is one word of Slurm's --gres syntax: lowercase letters,
// digits, '.', '_', at most 64 bytes.
var gresType = regexp.MustCompile(`^[a-z0-9][a-z0-9._]{0,63}$`)

// ValidGresType says whether t can be asked as a GRES type
// (gres/gpu:<t>:<n>) as it is.
func ValidGresType(t string) bool { return gresType.MatchString(t) }
