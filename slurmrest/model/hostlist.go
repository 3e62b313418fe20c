package model

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHostlist bounds how many names one hostlist may expand to.
const maxHostlist = 65536

// ExpandHostlist expands a Slurm hostlist ("gpu-[0-2,5],cpu-01") into
// names, in order. Only the forms slurmctld prints are read: one bracket
// group per name, with numbers and ranges (zero padding kept).
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for _, part := range splitTop(s) {
		if part == "" {
			continue
		}
		open := strings.IndexByte(part, '[')
		if open < 0 {
			out = append(out, part)
			continue
		}
		end := strings.IndexByte(part, ']')
		if end < open {
			return nil, fmt.Errorf("hostlist %q: unbalanced brackets", s)
		}
		prefix, suffix := part[:open], part[end+1:]
		if strings.ContainsAny(suffix, "[]") {
			return nil, fmt.Errorf("hostlist %q: more than one range in a name", s)
		}
		for _, r := range strings.Split(part[open+1:end], ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a {
				return nil, fmt.Errorf("hostlist %q: bad range %q", s, r)
			}
			if len(out)+b-a+1 > maxHostlist {
				return nil, fmt.Errorf("hostlist %q: more than %d names", s, maxHostlist)
			}
			for i := a; i <= b; i++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), i, suffix))
			}
		}
	}
	return out, nil
}

// splitTop splits at commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}
