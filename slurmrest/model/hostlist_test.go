package model

import (
	"slices"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "gpu-0", want: []string{"gpu-0"}},
		{in: "gpu-[0-2]", want: []string{"gpu-0", "gpu-1", "gpu-2"}},
		{in: "gpu-[1,3-4],cpu-7", want: []string{"gpu-1", "gpu-3", "gpu-4", "cpu-7"}},
		{in: "sim-[0998-1000]", want: []string{"sim-0998", "sim-0999", "sim-1000"}},
		{in: "n[8-10]x", want: []string{"n8x", "n9x", "n10x"}},
		{in: "", want: nil},
		{in: "gpu-[2-1]", err: true},
		{in: "gpu-[a-b]", err: true},
		{in: "gpu-]0[", err: true},
		{in: "a[0-999999]", err: true},
	} {
		got, err := ExpandHostlist(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("ExpandHostlist(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
