package model

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseGresDetail(t *testing.T) {
	tests := []struct {
		detail string
		want   []int
		err    string
	}{
		{detail: "gpu:h100:2(IDX:0-1)", want: []int{0, 1}},
		{detail: "gpu:nvidia_h100_80gb_hbm3:4(IDX:0,3,5-6)", want: []int{0, 3, 5, 6}},
		{detail: "gpu:2(IDX:4-5)", want: []int{4, 5}},
		{detail: "gpu:a100:1(IDX:2),gpu:h100:1(IDX:5)", want: []int{2, 5}},
		{detail: "shard:h100:2(2/4,0/4),gpu:h100:1(IDX:1)", want: []int{1}},
		// Slurm 24.11, gres/gpu:2 on a node with two types (the lab's real node).
		{detail: "gpu:nvidia_a100-sxm4-80gb:2(IDX:0-1),gpu:nvidia_h100_80gb_hbm3:0(IDX:)", want: []int{0, 1}},
		{detail: "gpu:a100:0(IDX:N/A),gpu:h100:1(IDX:3)", want: []int{3}},
		{detail: "gpu:h100:2(IDX:N/A)", err: "bad index"},
		{detail: "gpu:h100:1(IDX:)", err: "bad index"},
		{detail: "gpu:h100:3(IDX:0-1)", err: "count 3 but 2 indices"},
		{detail: "gpu:h100:2(IDX:1,1)", err: "index 1 twice"},
		{detail: "gpu:h100:2", err: "no (IDX"},
		{detail: "gpu:h100:2(IDX:3-1)", err: "bad index range"},
		{detail: "license:1", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.detail, func(t *testing.T) {
			got, err := ParseGresDetail(tt.detail)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestJobGPUIndexes(t *testing.T) {
	j := Job{ID: 7, GresDetail: map[string]string{"gpu-0": "gpu:h100:2(IDX:6-7)", "cpu-0": ""}}
	idx, err := j.GPUIndexes("gpu-0")
	require.NoError(t, err)
	assert.Equal(t, []int{6, 7}, idx)
	_, err = j.GPUIndexes("cpu-0")
	assert.ErrorIs(t, err, ErrNoGPUIndexes)
	_, err = j.GPUIndexes("gpu-9")
	assert.ErrorIs(t, err, ErrNoGPUIndexes)
}

func TestShowJobGPUIndexes(t *testing.T) {
	// What `scontrol show job -d` prints for a two-node GPU job (Slurm
	// 24.11, the lab's), the detail lines indented under the job.
	out := `JobId=532 JobName=e2e-dra
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=dyn-[0-1] BatchHost=dyn-0
   NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   ReqTRES=cpu=2,mem=128M,node=2,billing=2,gres/gpu=4
     Nodes=dyn-0 CPU_IDs=0-1 Mem=64 GRES=gpu:2(IDX:0,3)
     Nodes=dyn-[1,3] CPU_IDs=0 Mem=64 GRES=gpu:h100:2(IDX:4-5)
     Nodes=cpu-0 CPU_IDs=0 Mem=64 GRES=
   MinCPUsNode=1 MinMemoryNode=64M MinTmpDiskNode=0
`
	for _, tc := range []struct {
		node string
		want []int
		err  bool
	}{
		{"dyn-0", []int{0, 3}, false},
		{"dyn-1", []int{4, 5}, false},
		{"dyn-3", []int{4, 5}, false},
		{"dyn-2", nil, true},
		{"cpu-0", nil, true},
	} {
		got, err := ShowJobGPUIndexes(out, tc.node)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v (err %v)", tc.node, got, err, tc.want, tc.err)
		}
		if tc.err && !errors.Is(err, ErrNoGPUIndexes) {
			t.Errorf("%s: %v does not wrap ErrNoGPUIndexes", tc.node, err)
		}
	}
}

func TestGPUTypes(t *testing.T) {
	for gres, want := range map[string][]string{
		"gpu:bbb:2,gpu:aaa:1":           {"bbb", "bbb", "aaa"},
		"gpu:h100:2(S:0-1),tmpdisk:100": {"h100", "h100"},
		"gpu:2":                         {"", ""},
		"":                              nil,
		"gpu:h100:x,mps:100":            nil,
	} {
		if got := GPUTypes(gres); !slices.Equal(got, want) {
			t.Errorf("GPUTypes(%q) = %q, want %q", gres, got, want)
		}
	}
}
