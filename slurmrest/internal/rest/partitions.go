package rest

import (
	"context"
	"net/http"

	"github.com/onepool/onepool/slurmrest/model"
)

const pathPartitions = "/partitions/"

// ListPartitions lists the partitions.
func (b *Backend) ListPartitions(ctx context.Context) ([]model.Partition, error) {
	const op = "list partitions"
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathPartitions})
	if err != nil {
		return nil, err
	}
	var resp partitionsResp
	if err := decode(op, b.endpoint(http.MethodGet, pathPartitions), r, &resp); err != nil {
		return nil, err
	}
	out := make([]model.Partition, 0, len(resp.Partitions))
	for _, p := range resp.Partitions {
		mp := model.Partition{Name: deref(p.Name)}
		if p.Nodes != nil {
			mp.Nodes = deref(p.Nodes.Configured)
			mp.TotalNodes = int(deref(p.Nodes.Total))
		}
		if p.Cpus != nil {
			mp.TotalCPUs = int(deref(p.Cpus.Total))
		}
		if p.Partition != nil {
			mp.State = deref(p.Partition.State)
		}
		out = append(out, mp)
	}
	return out, nil
}
