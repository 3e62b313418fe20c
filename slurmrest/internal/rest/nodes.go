package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// Paths after /slurm/<version>.
const (
	pathNodes = "/nodes/"
	pathNode  = "/node/{node_name}"
	pathPing  = "/ping/"
)

// Ping asks slurmrestd to ping slurmctld.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := b.call(ctx, request{op: "ping", method: http.MethodGet, path: pathPing})
	return err
}

// ListNodes lists nodes; with since set, nil means nothing changed.
//
// 24.11.5 answers a listing with update_time, where nodes changed but
// partitions did not, with an error (isPartitionQueryBug): that means
// "changed", so the nodes are listed in full.
func (b *Backend) ListNodes(ctx context.Context, since time.Time) (*model.NodeList, error) {
	sink := &nodeSink{}
	r, err := b.getNodes(ctx, since, sink)
	if ae := (*model.APIError)(nil); !since.IsZero() && errors.As(err, &ae) && isPartitionQueryBug(ae) {
		sink = &nodeSink{}
		r, err = b.getNodes(ctx, time.Time{}, sink)
	}
	if err != nil {
		return nil, err
	}
	if r.status == http.StatusNotModified {
		return nil, nil
	}
	last, err := r.members.lastUpdate()
	if err != nil {
		return nil, badResponse("list nodes", b.endpoint(http.MethodGet, pathNodes), r, "%w", err)
	}
	return &model.NodeList{Nodes: sink.nodes, LastUpdate: unixTime(&last)}, nil
}

// getNodes streams a node listing into sink (10,000 nodes on 24.11: 14.7 MB
// that are never held whole).
func (b *Backend) getNodes(ctx context.Context, since time.Time, sink *nodeSink) (*response, error) {
	return b.call(ctx, request{op: "list nodes", method: http.MethodGet, path: pathNodes, query: sinceQuery(since),
		streamKey: "nodes", elem: sink.elem})
}

// nodeSink converts the nodes of a listing as they are decoded.
type nodeSink struct {
	nodes []model.Node
}

func (s *nodeSink) elem(d *json.Decoder) error {
	var w wireNode
	if err := d.Decode(&w); err != nil {
		return fmt.Errorf("node %d: %w", len(s.nodes), err)
	}
	n, err := toNode(&w, len(s.nodes))
	if err != nil {
		return err
	}
	s.nodes = append(s.nodes, n)
	return nil
}

// GetNode reads one node. slurmrestd answers an unknown name with HTTP 200,
// no node and an error "Failure to query node X" (errno 0): that is
// ErrNotFound, not an empty success.
func (b *Backend) GetNode(ctx context.Context, name string) (*model.Node, error) {
	op := "get node " + name
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathNode, args: []string{name}})
	var ae *model.APIError
	if errors.As(err, &ae) && isUnknownNode(ae) {
		ae.Kind = model.ErrNotFound
		return nil, ae
	}
	if err != nil {
		return nil, err
	}
	nodes, _, err := DecodeNodes(r.body)
	if err != nil {
		return nil, badResponse(op, b.endpoint(http.MethodGet, pathNode), r, "%w", err)
	}
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i], nil
		}
	}
	return nil, &model.APIError{Op: op, Endpoint: b.endpoint(http.MethodGet, pathNode), StatusCode: r.status, Kind: model.ErrNotFound,
		Err: fmt.Errorf("the answer holds no node %s", name)}
}

// UpdateNode changes one node (drain, resume, comment, features).
func (b *Backend) UpdateNode(ctx context.Context, name string, u model.NodeUpdate) error {
	op := fmt.Sprintf("update node %s to %s", name, strings.Join(u.State, ","))
	if u.Features != nil {
		op = fmt.Sprintf("set node %s's features to %s", name, strings.Join(*u.Features, ","))
	}
	_, err := b.call(ctx, request{op: op, method: http.MethodPost, path: pathNode, args: []string{name}, body: updateMsg(u)})
	return err
}

// DeleteNode removes a node record; Slurm refuses while jobs run there.
func (b *Backend) DeleteNode(ctx context.Context, name string) error {
	_, err := b.call(ctx, request{op: "delete node " + name, method: http.MethodDelete, path: pathNode, args: []string{name}})
	return err
}

// UpdateNodes changes many nodes in one request.
func (b *Backend) UpdateNodes(ctx context.Context, names []string, u model.NodeUpdate) error {
	if len(names) == 0 {
		return nil
	}
	msg := updateMsg(u)
	msg.Name = ptr(names)
	op := fmt.Sprintf("update %d nodes to %s", len(names), strings.Join(u.State, ","))
	_, err := b.call(ctx, request{op: op, method: http.MethodPost, path: pathNodes, body: msg})
	return err
}

func updateMsg(u model.NodeUpdate) updateNodeMsg {
	msg := updateNodeMsg{Comment: u.Comment, Features: u.Features, FeaturesAct: u.Features}
	if len(u.State) > 0 {
		msg.State = ptr(u.State)
	}
	if u.Reason != "" {
		msg.Reason = ptr(u.Reason)
	}
	return msg
}

// DecodeNodes reads a /nodes/ or /node/X answer into model nodes.
func DecodeNodes(body []byte) ([]model.Node, time.Time, error) {
	sink := &nodeSink{}
	m, err := decodeStream(bytes.NewReader(body), "nodes", sink.elem)
	if err != nil {
		return nil, time.Time{}, err
	}
	last, err := m.lastUpdate()
	if err != nil {
		return nil, time.Time{}, err
	}
	return sink.nodes, unixTime(&last), nil
}

// toNode is the model node of the i-th node of an answer.
func toNode(n *wireNode, i int) (model.Node, error) {
	if deref(n.Name) == "" {
		return model.Node{}, fmt.Errorf("node %d has no name", i)
	}
	return model.Node{
		Name:            deref(n.Name),
		Hostname:        deref(n.Hostname),
		Address:         deref(n.Address),
		State:           model.NodeState(deref(n.State)),
		Reason:          deref(n.Reason),
		ReasonSetByUser: deref(n.ReasonSetByUser),
		ReasonChanged:   unixTime(n.ReasonChangedAt),
		Partitions:      deref(n.Partitions),
		Features:        deref(n.Features),
		CPUs:            int(deref(n.Cpus)),
		RealMemoryMB:    deref(n.RealMemory),
		Gres:            deref(n.Gres),
		GresUsed:        deref(n.GresUsed),
		Comment:         deref(n.Comment),
		BootTime:        unixTime(n.BootTime),
		SlurmdStarted:   unixTime(n.SlurmdStartTime),
		SlurmVersion:    deref(n.Version),
	}, nil
}
