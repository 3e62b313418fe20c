package v0042

import (
	"context"
	"net/http"

	gen "github.com/onepool/onepool/slurmrest/internal/gen/v0042"
	"github.com/onepool/onepool/slurmrest/model"
)

const epPartitions = "GET " + apiPrefix + "/partitions/"

// ListPartitions lists the partitions.
func (b *Backend) ListPartitions(ctx context.Context) ([]model.Partition, error) {
	r, err := call(ctx, "list partitions", epPartitions, func(ctx context.Context) (*http.Response, error) {
		return b.c.SlurmV0042GetPartitions(ctx, nil)
	})
	if err != nil {
		return nil, err
	}
	var resp gen.V0042OpenapiPartitionResp
	if err := decode("list partitions", epPartitions, r, &resp); err != nil {
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
