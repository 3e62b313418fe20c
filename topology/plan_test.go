package topology

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const (
	spine = "example.com/spine"
	leaf  = "example.com/leaf"
)

func node(name, s, l string) Node {
	labels := map[string]string{}
	if s != "" {
		labels[spine] = s
	}
	if l != "" {
		labels[leaf] = l
	}
	return Node{Name: name, Labels: labels}
}

// body is the file without its header comment.
func body(conf string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(conf), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

func TestRender(t *testing.T) {
	levels := []string{spine, leaf}
	for _, tc := range []struct {
		name     string
		levels   []string
		nodes    []Node
		want     string
		problems []string // node: reason
	}{
		{
			name:   "one spine, two leaves: no root needed",
			levels: levels,
			nodes:  []Node{node("gpu-2", "s1", "l2"), node("gpu-1", "s1", "l1"), node("gpu-0", "s1", "l1")},
			want: `SwitchName=l1 Nodes=gpu-0,gpu-1
SwitchName=l2 Nodes=gpu-2
SwitchName=s1 Switches=l1,l2`,
		},
		{
			name:   "two spines joined by the root",
			levels: levels,
			nodes:  []Node{node("a", "s1", "l1"), node("b", "s2", "l2")},
			want: `SwitchName=l1 Nodes=a
SwitchName=l2 Nodes=b
SwitchName=s1 Switches=l1
SwitchName=s2 Switches=l2
SwitchName=root Switches=s1,s2`,
		},
		{
			name:   "a node without a label, and one without a Kubernetes Node, go under unlabeled",
			levels: levels,
			nodes:  []Node{node("a", "s1", "l1"), node("b", "s1", ""), {Name: "c"}},
			want: `SwitchName=l1 Nodes=a
SwitchName=s1 Switches=l1
SwitchName=unlabeled Nodes=b,c
SwitchName=root Switches=s1,unlabeled`,
			problems: []string{"b: " + ReasonLabelMissing, "c: " + ReasonLabelMissing},
		},
		{
			name:   "a leaf under two spines: the later node (by name) conflicts",
			levels: levels,
			nodes:  []Node{node("b", "s2", "l1"), node("a", "s1", "l1")},
			want: `SwitchName=l1 Nodes=a
SwitchName=s1 Switches=l1
SwitchName=unlabeled Nodes=b
SwitchName=root Switches=s1,unlabeled`,
			problems: []string{"b: " + ReasonLabelConflict},
		},
		{
			name:   "a value used at two levels conflicts",
			levels: levels,
			nodes:  []Node{node("a", "x", "l1"), node("b", "s1", "x"), node("c", "y", "y")},
			want: `SwitchName=l1 Nodes=a
SwitchName=x Switches=l1
SwitchName=unlabeled Nodes=b,c
SwitchName=root Switches=unlabeled,x`,
			problems: []string{"b: " + ReasonLabelConflict, "c: " + ReasonLabelConflict},
		},
		{
			name:     "onepool's own switch names cannot be label values",
			levels:   levels,
			nodes:    []Node{node("a", "root", "l1")},
			want:     `SwitchName=unlabeled Nodes=a`,
			problems: []string{"a: " + ReasonLabelConflict},
		},
		{
			name:   "one level",
			levels: []string{leaf},
			nodes:  []Node{node("a", "", "l1"), node("b", "", "l2")},
			want: `SwitchName=l1 Nodes=a
SwitchName=l2 Nodes=b
SwitchName=root Switches=l1,l2`,
		},
		{
			name:   "no node yet: only the header",
			levels: levels,
			want:   ``,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, problems := Render(tc.levels, tc.nodes)
			assert.Equal(t, tc.want, body(conf))
			assert.True(t, strings.HasPrefix(conf, "# Written by onepool"), conf)
			var got []string
			for _, p := range problems {
				got = append(got, p.Node+": "+p.Reason)
				assert.Contains(t, p.Message, UnlabeledSwitch, "the message says where the node went")
			}
			assert.Equal(t, tc.problems, got)
		})
	}
}

// The same nodes in any order give the same file (no needless rewrites).
func TestRenderIsStable(t *testing.T) {
	levels := []string{spine, leaf}
	a, _ := Render(levels, []Node{node("a", "s1", "l1"), node("b", "s2", "l2"), node("c", "s1", "")})
	b, _ := Render(levels, []Node{node("c", "s1", ""), node("b", "s2", "l2"), node("a", "s1", "l1")})
	assert.Equal(t, a, b)
}
