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
	for _, tc := range []struct {
		name string
		r    reader
		want []string // the settings named
	}{
		{"all there", reader{nodes: []model.Node{cpuNode, gpuNode}, parts: parts, qos: qos}, nil},
		{"a typed GPU among other GRES", reader{nodes: []model.Node{{Name: "n", Gres: "tmpdisk:100,gpu:a100:2(S:0)"}}, parts: parts, qos: qos}, nil},
		{"no GPU node", reader{nodes: []model.Node{cpuNode}, parts: parts, qos: qos}, []string{"GresTypes=gpu"}},
		{"no partition", reader{nodes: []model.Node{gpuNode}, qos: qos}, []string{"PartitionName"}},
		{"no QOS preempts", reader{nodes: []model.Node{gpuNode}, parts: parts, qos: qos[:1]}, []string{"PreemptType=preempt/qos"}},
		{"no slurmdbd", reader{nodes: []model.Node{gpuNode}, parts: parts, qosErr: model.ErrSlurm}, []string{"AccountingStorageType"}},
		{"nothing", reader{}, []string{"GresTypes=gpu", "PartitionName", "PreemptType=preempt/qos"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Check(context.Background(), tc.r)
			require.NoError(t, err)
			require.Len(t, got, len(tc.want), "%v", got)
			for i, w := range tc.want {
				assert.Contains(t, got[i].Setting, w)
				assert.NotEmpty(t, got[i].Why)
			}
		})
	}
}

func TestCheckUnreadable(t *testing.T) {
	_, err := Check(context.Background(), reader{nodesErr: model.ErrUnreachable})
	assert.ErrorIs(t, err, ErrUnreadable)
	assert.True(t, errors.Is(err, model.ErrUnreachable))
}
