package lab

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseDrained(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []DrainedNode
	}{
		{"none", "gpu-0|idle|none\ngpu-1|allocated|none\n", nil},
		{"empty", "", nil},
		{"slurm's own drain after a lost job id, listed once per partition",
			"dyn-2|drained|Duplicate jobid\ngpu-0|idle|none\ndyn-2|drained|Duplicate jobid\n",
			[]DrainedNode{{"dyn-2", "drained", "Duplicate jobid"}}},
		{"draining and a reason with a bar", "gpu-3|draining|onepool: cordon | x\ngpu-1|drained*|Not responding\n",
			[]DrainedNode{{"gpu-1", "drained*", "Not responding"}, {"gpu-3", "draining", "onepool: cordon | x"}}},
		{"down is not drained", "dyn-0|down*|Not responding\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, parseDrained(tc.out))
		})
	}
}
