package keys

import (
	"strings"
	"testing"
)

func TestCordonReason(t *testing.T) {
	for _, tc := range []struct {
		words, want string
		ok          bool
	}{
		{"", "onepool: node cordoned", true},
		{"  ", "onepool: node cordoned", true},
		{"replace PSU", "onepool: node cordoned: replace PSU", true},
		{"line\nbreak", "onepool: node cordoned", false},
		{strings.Repeat("x", 201), "onepool: node cordoned", false},
		{"bad \xff utf8", "onepool: node cordoned", false},
	} {
		got, ok := CordonReason(tc.words)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CordonReason(%q) = %q, %v; want %q, %v", tc.words, got, ok, tc.want, tc.ok)
		}
		if !OwnsReason(got) {
			t.Errorf("OwnsReason(%q) = false for onepool's own reason", got)
		}
	}
	if OwnsReason("bad ECC") || OwnsReason("onepool") {
		t.Error("OwnsReason claims a reason onepool did not make")
	}
}
