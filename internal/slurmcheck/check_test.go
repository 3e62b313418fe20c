package slurmcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest/model"
)

type reader struct {
	nodes    []model.Node
	nodesErr error
	parts    []model.Partition
	qos      []model.QOS
	qosErr   error
}

func (r reader) ListNodes(context.Context, time.Time) (*model.NodeList, error) {
	if r.nodesErr != nil {
		return nil, r.nodesErr
	}
	return &model.NodeList{Nodes: r.nodes}, nil
}
func (r reader) ListPartitions(context.Context) ([]model.Partition, error) { return r.parts, nil }
func (r reader) ListQOS(context.Context) ([]model.QOS, error)              { return r.qos, r.qosErr }

func TestCheck(t *testing.T) {
	gpuNode := model.Node{Name: "gpu-0", Gres: "gpu:h100:8"}
	cpuNode := model.Node{Name: "cpu-0", Gres: ""}
	parts := []model.Partition{{Name: "gpu"}}
	qos := []model.QOS{{Name: "normal"}, {Name: "high", Preempt: []string{"normal"}}}
	notFound := &model.APIError{Op: "list QOS", StatusCode: 404, Kind: model.ErrNotFound}
	for _, tc := range []struct {
		name      string
		r         reader
		missing   []string // the settings named missing
		unchecked []string // and those not checked
	}{
		{"all there", reader{nodes: []model.Node{cpuNode, gpuNode}, parts: parts, qos: qos}, nil, nil},
		{"a typed GPU among other GRES", reader{nodes: []model.Node{{Name: "n", Gres: "tmpdisk:100,gpu:a100:2(S:0)"}}, parts: parts, qos: qos}, nil, nil},
		{"no GPU node", reader{nodes: []model.Node{cpuNode}, parts: parts, qos: qos}, []string{"GresTypes=gpu"}, nil},
		{"no partition", reader{nodes: []model.Node{gpuNode}, qos: qos}, []string{"PartitionName"}, nil},
		{"no QOS preempts", reader{nodes: []model.Node{gpuNode}, parts: parts, qos: qos[:1]}, []string{"PreemptType=preempt/qos"}, nil},
		{"no slurmdbd", reader{nodes: []model.Node{gpuNode}, parts: parts, qosErr: model.ErrSlurm}, []string{"AccountingStorageType"}, nil},
		{"a slurmrestd without slurmdb endpoints", reader{nodes: []model.Node{gpuNode}, parts: parts, qosErr: notFound},
			nil, []string{"AccountingStorageType"}},
		{"nothing", reader{}, []string{"GresTypes=gpu", "PartitionName", "PreemptType=preempt/qos"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Check(context.Background(), tc.r)
			require.NoError(t, err)
			for _, c := range []struct {
				got  []Finding
				want []string
			}{{got.Missing, tc.missing}, {got.Unchecked, tc.unchecked}} {
				require.Len(t, c.got, len(c.want), "%v", c.got)
				for i, w := range c.want {
					assert.Contains(t, c.got[i].Setting, w)
					assert.NotEmpty(t, c.got[i].Why)
				}
			}
		})
	}
}

func TestCheckUnreadable(t *testing.T) {
	_, err := Check(context.Background(), reader{nodesErr: model.ErrUnreachable})
	assert.ErrorIs(t, err, ErrUnreadable)
	assert.True(t, errors.Is(err, model.ErrUnreachable))
}
