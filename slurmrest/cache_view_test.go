package slurmrest

import (
	"slices"
	"testing"
	"time"
)

func nodeView() *view[string, Node] {
	return newView(func(n *Node) string { return n.Name }, (*Node).Equal)
}

func evTypes(evs []event[Node]) []string {
	var out []string
	for _, e := range evs {
		name := ""
		if e.new != nil {
			name = e.new.Name
		} else {
			name = e.old.Name
		}
		out = append(out, e.typ+":"+name)
	}
	return out
}

func TestViewApply(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	old := now.Add(-time.Minute)
	idle := NodeState{"IDLE"}
	drain := NodeState{"IDLE", "DRAIN"}
	steps := []struct {
		name  string
		list  []Node
		want  []string
		since time.Time
	}{
		{"first listing adds all", []Node{{Name: "a", State: idle}, {Name: "b", State: idle}}, []string{"add:a", "add:b"}, old},
		{"a ping changes nothing", []Node{{Name: "a", State: idle, SlurmdStarted: now}, {Name: "b", State: idle}}, nil, old},
		{"a drain is an update", []Node{{Name: "a", State: drain, Reason: "x"}, {Name: "b", State: idle}}, []string{"update:a"}, old},
		{"one miss is not a delete", []Node{{Name: "a", State: drain, Reason: "x"}}, nil, time.Time{}},
		{"back again: no event", []Node{{Name: "a", State: drain, Reason: "x"}, {Name: "b", State: idle}}, nil, old},
		{"two misses in a row delete", []Node{{Name: "a", State: drain, Reason: "x"}}, nil, time.Time{}},
		{"", []Node{{Name: "a", State: drain, Reason: "x"}}, []string{"delete:b"}, old},
	}
	v := nodeView()
	for i, s := range steps {
		evs := v.apply(slices.Clone(s.list), old, now)
		if got := evTypes(evs); !slices.Equal(got, s.want) {
			t.Errorf("step %d (%s): events %v, want %v", i, s.name, got, s.want)
		}
		if !v.since.Equal(s.since) {
			t.Errorf("step %d (%s): next since %v, want %v", i, s.name, v.since, s.since)
		}
	}
}

func TestNextSince(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name       string
		lastUpdate time.Time
		want       time.Time
	}{
		{"no update time: list in full", time.Time{}, time.Time{}},
		{"old change: ask from it", now.Add(-10 * time.Second), now.Add(-10 * time.Second)},
		{"change in the previous second: ask from it", now.Add(-time.Second), now.Add(-time.Second)},
		{"change in this second: ask again from one second before", now, now.Add(-time.Second)},
	} {
		if got := nextSince(tc.lastUpdate, now); !got.Equal(tc.want) {
			t.Errorf("%s: nextSince = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A refresh's listing (applyChanges) brings adds and updates but never
// counts a miss: however many refreshes lack an object between two
// regular listings, only missesBeforeDelete regular ones delete it.
func TestViewApplyChangesNeverDeletes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	old := now.Add(-time.Minute)
	idle, drain := NodeState{"IDLE"}, NodeState{"IDLE", "DRAIN"}
	a, b := Node{Name: "a", State: idle}, Node{Name: "b", State: idle}
	aDrained := Node{Name: "a", State: drain, Reason: "x"}
	steps := []struct {
		name    string
		refresh bool
		list    []Node
		want    []string
	}{
		{"regular: first listing", false, []Node{a, b}, []string{"add:a", "add:b"}},
		{"refresh: an update comes at once", true, []Node{aDrained}, []string{"update:a"}},
		{"refresh: b missing again", true, []Node{aDrained}, nil},
		{"refresh: and again", true, []Node{aDrained}, nil},
		{"regular: first miss", false, []Node{aDrained}, nil},
		{"refresh: still no delete", true, []Node{aDrained}, nil},
		{"regular: second miss deletes", false, []Node{aDrained}, []string{"delete:b"}},
		{"refresh: an add comes at once", true, []Node{aDrained, b}, []string{"add:b"}},
	}
	v := nodeView()
	for i, s := range steps {
		apply := v.apply
		if s.refresh {
			apply = v.applyChanges
		}
		if got := evTypes(apply(slices.Clone(s.list), old, now)); !slices.Equal(got, s.want) {
			t.Errorf("step %d (%s): events %v, want %v", i, s.name, got, s.want)
		}
	}
}
