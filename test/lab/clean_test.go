package lab

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
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

func TestNodeCleanPatch(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cordoned    bool
		annotations map[string]string
		want, what  string
	}{
		{"clean", false, map[string]string{"other": "x"}, "", ""},
		{"cordoned", true, nil, `{"spec":{"unschedulable":null}}`, "cordoned"},
		{"a drain record another release's soak left, beside someone else's annotation", false,
			map[string]string{keys.AnnotationDrainApplied: drain.ReasonCordoned, keys.AnnotationDrainAppliedAt: "2026-11-27T08:00:00Z", "other": "x"},
			`{"metadata":{"annotations":{"onepool.dev/drain-applied":null,"onepool.dev/drain-applied-at":null}}}`,
			"with onepool.dev/drain-applied, onepool.dev/drain-applied-at"},
		{"cordoned with words and Slurm's view mirrored", true,
			map[string]string{keys.AnnotationCordonReason: "maintenance", keys.AnnotationSlurmReason: "Duplicate jobid"},
			`{"metadata":{"annotations":{"onepool.dev/cordon-reason":null,"slurm.onepool.dev/reason":null}},"spec":{"unschedulable":null}}`,
			"cordoned with onepool.dev/cordon-reason, slurm.onepool.dev/reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, what := nodeCleanPatch(tc.cordoned, tc.annotations)
			assert.Equal(t, tc.what, what)
			if tc.want == "" {
				assert.Nil(t, patch)
				return
			}
			assert.JSONEq(t, tc.want, string(patch))
		})
	}
}
