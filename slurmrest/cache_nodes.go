package slurmrest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// NodeFollow says how a Cache keeps current the nodes read through Node:
// the nodes onepool serves (slurmd pods, NodeSet members), next to a table
// that may hold ten thousand others.
//
// Neither Slurm release tells cheaply which nodes changed: an update_time
// delta of /nodes answers the whole table as soon as any node changed
// (26.05), or HTTP 500 and then the whole table (24.11), and a live
// cluster's table moves at least once per slurmd ping round. Reading the
// followed nodes by name costs what onepool serves (about 2 KB a node a
// poll); listing the table on each change costs the cluster's size (15.7
// MB at 10,000 nodes). slurmrest/README.md has the figures.
type NodeFollow uint8

const (
	// NodeFollowAuto (the default) reads the followed nodes by name while
	// they are at most 1/followShare of the table (and at most
	// maxFollowedNodes; none: a ping), else it asks the table each poll, as
	// it does a table of fewer than followShare nodes (a listing of a few
	// dozen KB).
	NodeFollowAuto NodeFollow = iota
	// NodeFollowNever asks the table (update_time delta) each poll.
	NodeFollowNever
	// NodeFollowAlways reads the followed nodes by name each poll,
	// however many there are (tests; a site that knows its numbers).
	NodeFollowAlways
)

// ParseNodeFollow reads auto, never or always (a flag's value).
func ParseNodeFollow(s string) (NodeFollow, error) {
	switch s {
	case "", "auto":
		return NodeFollowAuto, nil
	case "never":
		return NodeFollowNever, nil
	case "always":
		return NodeFollowAlways, nil
	}
	return 0, fmt.Errorf("node follow mode %q: want auto, never or always", s)
}

const (
	// followShare: auto follows by name while the followed nodes are at
	// most this fraction of the table. A by-name poll of F of N nodes costs
	// F/N of one listing; listing on change costs a listing per change, at
	// least one per ping round (SlurmdTimeout/3) on a live cluster.
	followShare = 32
	// maxFollowedNodes bounds the reads one poll makes (each is a
	// slurmctld RPC).
	maxFollowedNodes = 512
)

// followByName is a poll's choice: read the followed nodes by name (true)
// or ask the table's delta (false), for followed nodes of a table of
// tableNodes.
func followByName(mode NodeFollow, followed, tableNodes int) bool {
	switch mode {
	case NodeFollowNever:
		return false
	case NodeFollowAlways:
		return true
	}
	return tableNodes >= followShare && followed <= maxFollowedNodes && followed*followShare <= tableNodes
}

// errTableBusy: the table's listing of the last follow poll is still
// under way; this poll's is skipped.
var errTableBusy = errors.New("list nodes: a listing is under way")

// want notes a read of node name: it is followed for NodeFollowFor.
func (c *Cache) want(name string, now time.Time) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wanted[name] = now
}

// followedNames are the nodes read within NodeFollowFor, sorted; older
// ones are forgotten.
func (c *Cache) followedNames(now time.Time) []string {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	maps.DeleteFunc(c.wanted, func(_ string, at time.Time) bool { return now.Sub(at) > c.cfg.NodeFollowFor })
	return slices.Sorted(maps.Keys(c.wanted))
}

// pollNodes is a poll's node part: the followed nodes by name and the
// table every NodeListEvery (in the background), or the table's delta now.
func (c *Cache) pollNodes(ctx context.Context, now time.Time) error {
	names := c.followedNames(now)
	c.mu.RLock()
	byName := c.nodes.synced && followByName(c.cfg.NodeFollow, len(names), len(c.nodes.items))
	c.mu.RUnlock()
	if !byName {
		c.client.metrics.followedNodes.Set(0)
		return c.listTable(ctx, false)
	}
	c.client.metrics.followedNodes.Set(float64(len(names)))
	c.listTableIfDue(ctx, now)
	return c.followNodes(ctx, names)
}

// listTableIfDue starts the table's listing in the background when the
// last one is NodeListEvery old (and the backoff after failures allows):
// at 10,000 nodes it takes seconds, which the followed nodes' polls do
// not wait for.
func (c *Cache) listTableIfDue(ctx context.Context, now time.Time) {
	c.mu.Lock()
	due := !c.tableBusy && now.Sub(c.tableAsked) >= c.cfg.NodeListEvery && c.tableBackoff.until(now) == 0
	c.tableBusy = c.tableBusy || due // reserved for the listing below
	c.mu.Unlock()
	if !due {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		err := c.listTable(ctx, true)
		c.mu.Lock()
		c.tableBackoff.done(err == nil || ctx.Err() != nil, now, c.cfg.PollInterval)
		c.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			c.log.V(1).Info("slurmrest cache: node table listing failed", "error", err.Error())
		}
	}()
}

// listTable asks the table's update_time delta and merges it (a listing
// that finds a followed node read after it was asked keeps that read).
// One at a time: errTableBusy while another runs; reserved says the
// caller took the turn already.
func (c *Cache) listTable(ctx context.Context, reserved bool) error {
	if !reserved {
		c.mu.Lock()
		busy := c.tableBusy
		c.tableBusy = true
		c.mu.Unlock()
		if busy {
			return errTableBusy
		}
	}
	asked := time.Now()
	_, err := pollView(ctx, c, "node", c.nodes, true, c.client.ListNodes,
		func(l *NodeList) ([]Node, time.Time) { return l.Nodes, l.LastUpdate }, c.deliverNode)
	c.mu.Lock()
	c.tableBusy = false
	if err == nil {
		c.tableAsked = asked
	}
	c.mu.Unlock()
	return err
}

// followNodes reads the followed nodes by name (nothing to follow: a ping
// says slurmrestd and slurmctld answer). A node Slurm denies knowing in
// missesBeforeDelete polls in a row is deleted. Reads that failed leave
// their nodes as they were and fail the poll; the others stand.
func (c *Cache) followNodes(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return c.client.Ping(ctx)
	}
	asked := time.Now()
	nodes, gone, err := readEach(ctx, "node", names, c.client.GetNode)
	c.mu.Lock()
	evs := c.nodes.follow(nodes, gone, nil)
	for _, n := range nodes {
		c.nodeReadAt[n.Name] = asked
	}
	for _, name := range gone {
		c.nodeReadAt[name] = asked
	}
	if len(c.nodeReadAt) > len(names) {
		maps.DeleteFunc(c.nodeReadAt, func(name string, _ time.Time) bool {
			_, followed := slices.BinarySearch(names, name)
			return !followed
		})
	}
	c.mu.Unlock()
	for _, e := range evs {
		c.client.metrics.cacheEvents.WithLabelValues("node", e.typ).Inc()
		c.deliverNode(e)
	}
	return err
}

// nodeAsOfLocked is when what the view says of node name was asked: its
// last read by name or the table's last listing, whichever is later.
// Callers hold c.mu.
func (c *Cache) nodeAsOfLocked(name string) time.Time {
	if at := c.nodeReadAt[name]; at.After(c.tableAsked) {
		return at
	}
	return c.tableAsked
}

// heldNewerNode: the view's node was read by name after asked.
func (c *Cache) heldNewerNode(name string, asked time.Time) bool {
	return c.nodeReadAt[name].After(asked)
}
