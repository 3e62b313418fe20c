// Package topology keeps Slurm's topology.conf (topology/tree) in a
// ConfigMap, written from the labels of the Kubernetes Nodes behind Slurm's
// nodes.
package topology

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/onepool/onepool/keys"
)

// Switches onepool writes besides those named by labels.
const (
	// RootSwitch joins the top-level switches (and UnlabeledSwitch), so that
	// a job may span the whole cluster: Slurm's tree plugin lets a job use
	// only nodes under one switch.
	RootSwitch = "root"
	// UnlabeledSwitch holds the nodes whose Kubernetes Node lacks a level's
	// label (or has no Node, or labels Slurm cannot use): Slurm 24.11 gives
	// no job to a node that is in no switch.
	UnlabeledSwitch = "unlabeled"
)

// Problem reasons (Kubernetes event reasons on the Node).
const (
	ReasonLabelMissing  = keys.EventTopologyLabelMissing
	ReasonLabelConflict = keys.EventTopologyLabelConflict
)

// Node is one Slurm node and the labels of its Kubernetes Node (nil: no
// Kubernetes Node of that name).
type Node struct {
	Name   string
	Labels map[string]string
}

// Problem is why a node went under UnlabeledSwitch.
type Problem struct {
	Node    string
	Reason  string
	Message string
}

// Render is topology.conf for nodes, with levels the label keys from the
// top of the tree (e.g. a spine label) to its leaves (e.g. a rack label).
// A switch is named by its label value. A node goes under UnlabeledSwitch,
// with a Problem, when a level's label is missing or empty, or when its
// path contradicts another node's (a value used at two levels, a switch
// under two parents, a value named like onepool's own switches): the first
// node in name order keeps its path. The output is sorted, so equal inputs
// give equal files.
func Render(levels []string, nodes []Node) (string, []Problem) {
	nodes = append([]Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })

	type sw struct {
		level    int
		parent   string
		children map[string]bool // switches, or nodes at the last level
	}
	switches := map[string]*sw{}
	var unlabeled []string
	var problems []Problem
	for _, n := range nodes {
		path, problem := nodePath(levels, n)
		if problem == nil {
			problem = conflict(levels, n.Name, path, func(name string) (int, string, bool) {
				s, ok := switches[name]
				if !ok {
					return 0, "", false
				}
				return s.level, s.parent, true
			})
		}
		if problem != nil {
			unlabeled = append(unlabeled, n.Name)
			problems = append(problems, *problem)
			continue
		}
		for i, name := range path {
			s := switches[name]
			if s == nil {
				s = &sw{level: i, children: map[string]bool{}}
				if i > 0 {
					s.parent = path[i-1]
				}
				switches[name] = s
			}
			if i == len(path)-1 {
				s.children[n.Name] = true
			} else {
				s.children[path[i+1]] = true
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# Written by onepool's topology controller from Node labels %s; do not edit.\n", strings.Join(levels, " > "))
	if len(nodes) == 0 {
		b.WriteString("# No Slurm node yet.\n")
		return b.String(), nil
	}
	var top []string
	names := make([]string, 0, len(switches))
	for name, s := range switches {
		names = append(names, name)
		if s.level == 0 {
			top = append(top, name)
		}
	}
	// Leaves first, then each level up: Slurm reads children before parents.
	sort.Slice(names, func(i, j int) bool {
		a, c := switches[names[i]], switches[names[j]]
		if a.level != c.level {
			return a.level > c.level
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		s := switches[name]
		key := "Switches"
		if s.level == len(levels)-1 {
			key = "Nodes"
		}
		fmt.Fprintf(&b, "SwitchName=%s %s=%s\n", name, key, strings.Join(slices.Sorted(maps.Keys(s.children)), ","))
	}
	if len(unlabeled) > 0 {
		fmt.Fprintf(&b, "SwitchName=%s Nodes=%s\n", UnlabeledSwitch, strings.Join(unlabeled, ","))
		top = append(top, UnlabeledSwitch)
	}
	if len(top) > 1 {
		sort.Strings(top)
		fmt.Fprintf(&b, "SwitchName=%s Switches=%s\n", RootSwitch, strings.Join(top, ","))
	}
	return b.String(), problems
}

// nodePath is the node's switch at each level, or why it has none.
func nodePath(levels []string, n Node) ([]string, *Problem) {
	if n.Labels == nil {
		return nil, &Problem{Node: n.Name, Reason: ReasonLabelMissing, Message: "no Kubernetes Node of this name: in switch " + UnlabeledSwitch}
	}
	path := make([]string, len(levels))
	for i, key := range levels {
		v := n.Labels[key]
		if v == "" {
			return nil, &Problem{Node: n.Name, Reason: ReasonLabelMissing,
				Message: fmt.Sprintf("label %s is missing or empty: in Slurm switch %s until it is set", key, UnlabeledSwitch)}
		}
		path[i] = v
	}
	return path, nil
}

// conflict says why path cannot join the switches seen so far (lookup:
// a switch's level and parent).
func conflict(levels []string, node string, path []string, lookup func(string) (int, string, bool)) *Problem {
	for i, name := range path {
		if name == RootSwitch || name == UnlabeledSwitch {
			return &Problem{Node: node, Reason: ReasonLabelConflict,
				Message: fmt.Sprintf("label %s=%s: %q is onepool's own switch name: in switch %s", levels[i], name, name, UnlabeledSwitch)}
		}
		for j := 0; j < i; j++ {
			if path[j] == name {
				return &Problem{Node: node, Reason: ReasonLabelConflict,
					Message: fmt.Sprintf("labels %s and %s are both %q: in switch %s", levels[j], levels[i], name, UnlabeledSwitch)}
			}
		}
		level, parent, ok := lookup(name)
		if !ok {
			continue
		}
		if level != i {
			return &Problem{Node: node, Reason: ReasonLabelConflict,
				Message: fmt.Sprintf("label %s=%s: other nodes have %q as %s: in switch %s", levels[i], name, name, levels[level], UnlabeledSwitch)}
		}
		if i > 0 && parent != path[i-1] {
			return &Problem{Node: node, Reason: ReasonLabelConflict,
				Message: fmt.Sprintf("label %s=%s is under %s=%s on other nodes, not %s: in switch %s", levels[i], name, levels[i-1], parent, path[i-1], UnlabeledSwitch)}
		}
	}
	return nil
}
