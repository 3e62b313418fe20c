package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/internal/poolview"
)

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{nil, 2, "kubectl onepool status"},
		{[]string{"--help"}, 0, "kubectl onepool drains"},
		{[]string{"explode"}, 2, `unknown command "explode"`},
		{[]string{"status", "-o", "xml"}, 2, "-o xml"},
		{[]string{"status", "extra"}, 2, `unexpected "extra"`},
		{[]string{"explain"}, 2, "one pod"},
		{[]string{"explain", "pod", "a", "b"}, 2, "one pod"},
		{[]string{"drains", "--no-such-flag"}, 2, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut.String())
		assert.Contains(t, errOut.String(), tc.says, "%v", tc.args)
	}
}

func TestParseInterspersed(t *testing.T) {
	var o options
	fs := newFlags(&o, &bytes.Buffer{})
	pos, err := parseInterspersed(fs, []string{"pod", "-n", "ml", "infer-0", "-o", "json"})
	require.NoError(t, err)
	assert.Equal(t, []string{"pod", "infer-0"}, pos)
	assert.Equal(t, "ml", o.namespaces)
	assert.Equal(t, "json", o.output)
}

func TestFilter(t *testing.T) {
	view := []poolview.Node{
		{Node: "a", SlurmNode: "gpu-a", GPUs: []poolview.GPU{{Index: 0, Job: 1, Pod: "ml/x"}}},
		{Node: "b", SlurmNode: "gpu-b", GPUs: []poolview.GPU{{Index: 0, Job: 2}}},
		{Node: "web"},
	}
	names := func(v []poolview.Node) []string {
		var out []string
		for _, n := range v {
			out = append(out, n.Node)
		}
		return out
	}
	clone := func() []poolview.Node { return append([]poolview.Node(nil), view...) }
	assert.Equal(t, []string{"a", "b", "web"}, names(filter(clone(), options{})))
	assert.Equal(t, []string{"a", "web"}, names(filter(clone(), options{nodes: "gpu-a,web"})), "Slurm or Kubernetes names")
	assert.Equal(t, []string{"a"}, names(filter(clone(), options{namespaces: "ml"})))
	assert.Equal(t, []string{"a", "b"}, names(filter(clone(), options{partitions: "gpu"})), "a partition filter drops Nodes with no Slurm node")
}
