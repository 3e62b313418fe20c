package slurmnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

type notifier struct {
	nodes  []slurmrest.NodeHandler
	status []func(bool)
}

func (n *notifier) AddNodeHandler(h slurmrest.NodeHandler) { n.nodes = append(n.nodes, h) }
func (n *notifier) AddStatusHandler(f func(bool))          { n.status = append(n.status, f) }

// The cache's handlers never block, repeated changes of one node waiting
// to be taken come once, in order, and Start ends with its context.
func TestEventsCoalesceAndStop(t *testing.T) {
	n := &notifier{}
	e := NewEvents(n)
	require.Len(t, n.nodes, 1)
	require.Len(t, n.status, 1)

	// Nobody takes them yet: the handlers return all the same.
	for range 1000 {
		n.nodes[0].Update(nil, &slurmrest.Node{Name: "gpu-1"})
	}
	n.nodes[0].Add(&slurmrest.Node{Name: "gpu-2"})
	n.status[0](false)
	n.nodes[0].Delete(&slurmrest.Node{Name: "gpu-1"})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Start(ctx) }()
	var got []Change
	for range 3 {
		select {
		case ev := <-e.out:
			got = append(got, ev.Object)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v", got)
		}
	}
	assert.Equal(t, []Change{{Node: "gpu-1"}, {Node: "gpu-2"}, {All: true}}, got)

	n.nodes[0].Update(nil, &slurmrest.Node{Name: "gpu-3"})
	select {
	case ev := <-e.out:
		assert.Equal(t, Change{Node: "gpu-3"}, ev.Object)
	case <-time.After(10 * time.Second):
		t.Fatal("a change after the first batch never came")
	}

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not end with its context")
	}
}
