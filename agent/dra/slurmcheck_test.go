package dra

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/onepool/onepool/keys"
)

// The agent prepares a claim only when its devices are exactly the GPUs
// Slurm gave the claim's job on this node; anything else is refused, with
// an event on the pod naming both sets, and nothing is prepared.
func TestDriverPreparesOnlyTheGPUsSlurmGave(t *testing.T) {
	// GRES order of minors 4..7 is index 0..3.
	held := map[uint32][]int{7: {1, 2}, 8: {3}}
	for _, tc := range []struct {
		name    string
		job     string // the claim's job-id annotation ("" none)
		devices []string
		refused string
	}{
		{"the job's GPUs", "7", []string{"gpu-6", "gpu-5"}, ""},
		{"another job's GPU", "7", []string{"gpu-5", "gpu-7"}, "claim ns/c holds GRES indices [1 3], Slurm job 7 holds [1 2] here"},
		{"fewer than the job's", "7", []string{"gpu-5"}, "holds GRES indices [1], Slurm job 7 holds [1 2]"},
		{"a job with none here", "9", []string{"gpu-4"}, "Slurm job 9 holds [] here"},
		{"no job named (not onepool's allocation)", "", []string{"gpu-4"}, "names no Slurm job"},
		{"a job id that is not one", "x", []string{"gpu-4"}, `"x" is not a job id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			inv, err := NewInventory(fakeGPUs(4, 5, 6, 7))
			require.NoError(t, err)
			kc := fake.NewSimpleClientset()
			d, err := New(Config{NodeName: "n1", PluginDir: dir, CDIDir: filepath.Join(dir, "cdi"), Client: kc,
				JobGPUs: func(_ context.Context, job uint32) ([]int, error) { return held[job], nil }}, inv)
			require.NoError(t, err)
			var results []resourceapi.DeviceRequestAllocationResult
			for _, dev := range tc.devices {
				results = append(results, gpu("n1", dev))
			}
			c := claim("uid-c", "c", results...)
			if tc.job != "" {
				c.Annotations = map[string]string{keys.AnnotationJobID: tc.job}
			}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "infer-0", UID: "pod-uid"}}
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			require.NoError(t, err)
			evs, err := kc.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			if tc.refused == "" {
				assert.NoError(t, res["uid-c"].Err)
				assert.Empty(t, evs.Items)
				return
			}
			assert.True(t, errors.Is(res["uid-c"].Err, ErrNotSlurmsGPUs), "%v", res["uid-c"].Err)
			assert.ErrorContains(t, res["uid-c"].Err, tc.refused)
			st, err := loadState(dir)
			require.NoError(t, err)
			assert.Empty(t, st, "nothing prepared")
			require.Len(t, evs.Items, 1)
			ev := evs.Items[0]
			assert.Equal(t, corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "infer-0", UID: "pod-uid"}, ev.InvolvedObject)
			assert.Equal(t, keys.EventGPUClaimRefused, ev.Reason)
			assert.Contains(t, ev.Message, tc.refused)
		})
	}
}

// Slurm that cannot be asked is no refusal (no event); the kubelet asks
// again.
func TestDriverSlurmUnreachableIsNoRefusal(t *testing.T) {
	dir := t.TempDir()
	inv, err := NewInventory(fakeGPUs(4, 5))
	require.NoError(t, err)
	kc := fake.NewSimpleClientset()
	d, err := New(Config{NodeName: "n1", PluginDir: dir, CDIDir: filepath.Join(dir, "cdi"), Client: kc,
		JobGPUs: func(context.Context, uint32) ([]int, error) { return nil, errors.New("slurmctld: connection refused") }}, inv)
	require.NoError(t, err)
	c := claim("uid-c", "c", gpu("n1", "gpu-4"))
	c.Annotations = map[string]string{keys.AnnotationJobID: "7"}
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	assert.ErrorContains(t, res["uid-c"].Err, "connection refused")
	assert.False(t, errors.Is(res["uid-c"].Err, ErrNotSlurmsGPUs))
	evs, _ := kc.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	assert.Empty(t, evs.Items)
}
