package dra

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// migGPUs is issue 41's node as discovery returns it: GPU 0 partitioned
// 3g+2g+1g+1g, GPU 1 whole.
func migGPUs() []agent.GPU {
	unit := func(gi int, profile string, mem uint64) agent.GPU {
		return agent.GPU{Index: 0, Name: h100, UUID: fmt.Sprintf("MIG-%d", gi), Minor: 0, MemoryMiB: mem, Device: "/dev/nvidia0",
			MIG: &agent.MIG{ParentUUID: "GPU-0", ParentMemoryMiB: 81559, GI: gi, Profile: profile,
				Caps: []string{fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 10*gi), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 10*gi+1)}}}
	}
	return []agent.GPU{
		unit(1, "3g.40gb", 40192), unit(10, "1g.10gb", 9856), unit(5, "2g.20gb", 19968), unit(9, "1g.10gb", 9856),
		{Index: 1, Name: h100, UUID: "GPU-1", Minor: 1, MemoryMiB: 81559, Device: "/dev/nvidia1"},
	}
}

func TestInventoryMIGDevices(t *testing.T) {
	inv, err := NewInventory(migGPUs())
	require.NoError(t, err)
	// The same index ↔ device rule as whole GPUs: gres.conf's order.
	assert.Equal(t, map[string]int{"gpu-0-mig-9-0": 0, "gpu-0-mig-10-0": 1, "gpu-0-mig-5-0": 2, "gpu-0-mig-1-0": 3, "gpu-1": 4}, inv.GresIndex)
	byName := map[string]resourceapi.Device{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	d := byName["gpu-0-mig-5-0"]
	assert.Equal(t, "2g.20gb", *d.Attributes[keys.GPUAttrGresType].StringValue)
	assert.Equal(t, "MIG-5", *d.Attributes[keys.GPUAttrUUID].StringValue)
	assert.Equal(t, "GPU-0", *d.Attributes[keys.GPUAttrParentUUID].StringValue)
	assert.Equal(t, int64(0), *d.Attributes[keys.GPUAttrMinor].IntValue)
	mem := d.Capacity[keys.GPUCapacityMemory].Value
	assert.Equal(t, int64(19968)<<20, mem.Value())
	whole := byName["gpu-1"]
	assert.NotContains(t, whole.Attributes, resourceapi.QualifiedName(keys.GPUAttrParentUUID))
	assert.Equal(t, "nvidia_h100_80gb_hbm3", *whole.Attributes[keys.GPUAttrGresType].StringValue)
}

func TestDriverPreparesMIGDevices(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, t.TempDir(), migGPUs())
	a := claim("uid-a", "a", gpu("n1", "gpu-0-mig-9-0"))
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a})
	require.NoError(t, err)
	require.NoError(t, res["uid-a"].Err)
	spec := readSpec(t, d, "uid-a")
	require.Len(t, spec.Devices, 1)
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	// The GPU's device and exactly this MIG device's two capabilities.
	assert.Equal(t, []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap90", "/dev/nvidia-caps/nvidia-cap91"}, nodes)
	assert.Contains(t, spec.ContainerEdits.Env, "NVIDIA_VISIBLE_DEVICES=MIG-9")
	assert.Contains(t, spec.ContainerEdits.Env, "ONEPOOL_GRES_INDEXES=0")
	assert.Contains(t, spec.ContainerEdits.Env, "ONEPOOL_GPU_DEVICES=gpu-0-mig-9-0")

	// Another MIG device of the same GPU is another claim's; the same
	// one is not.
	res, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{
		claim("uid-b", "b", gpu("n1", "gpu-0-mig-10-0")), claim("uid-c", "c", gpu("n1", "gpu-0-mig-9-0")),
	})
	require.NoError(t, err)
	require.NoError(t, res["uid-b"].Err)
	assert.ErrorIs(t, res["uid-c"].Err, ErrDeviceBusy)
	// The partitioned GPU itself is no device.
	res, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-d", "d", gpu("n1", "gpu-0"))})
	require.NoError(t, err)
	assert.ErrorIs(t, res["uid-d"].Err, ErrUnknownDevice)
}

// consumed is each device's memory consumption in MiB by counter set, and
// the counter sets' memory, from a published pool.
func consumed(t *testing.T, pool resourceslice.Pool) (sets map[string]int64, uses map[string]string) {
	t.Helper()
	sets, uses = map[string]int64{}, map[string]string{}
	for _, sl := range pool.Slices {
		require.False(t, len(sl.SharedCounters) > 0 && len(sl.Devices) > 0, "a slice with both counters and devices")
		for _, cs := range sl.SharedCounters {
			v := cs.Counters[keys.GPUCounterMemory].Value
			sets[cs.Name] = v.Value() >> 20
		}
		for _, d := range sl.Devices {
			for _, c := range d.ConsumesCounters {
				v := c.Counters[keys.GPUCounterMemory].Value
				uses[d.Name] = fmt.Sprintf("%s:%d", c.CounterSet, v.Value()>>20)
			}
		}
	}
	return sets, uses
}

func TestResourcesPartitionable(t *testing.T) {
	twoCIs := func(ci int) agent.GPU {
		return agent.GPU{Index: 2, Name: h100, UUID: fmt.Sprintf("MIG-2-%d", ci), Minor: 2, MemoryMiB: 40192, Device: "/dev/nvidia2",
			MIG: &agent.MIG{ParentUUID: "GPU-2", ParentMemoryMiB: 81559, GI: 2, CI: ci, Profile: "1c.3g.40gb", Caps: []string{"a", "b"}}}
	}
	for _, tc := range []struct {
		name    string
		gpus    []agent.GPU
		sets    map[string]int64
		uses    map[string]string
		nSlices int
		skipped int
	}{
		{name: "issue 41's node: GPU 0 partitioned, GPU 1 whole", gpus: migGPUs(),
			sets:    map[string]int64{"gpu-0": 81559},
			uses:    map[string]string{"gpu-0-mig-1-0": "gpu-0:40192", "gpu-0-mig-5-0": "gpu-0:19968", "gpu-0-mig-9-0": "gpu-0:9856", "gpu-0-mig-10-0": "gpu-0:9856"},
			nSlices: 2},
		{name: "compute instances of one GPU instance share its memory", gpus: []agent.GPU{twoCIs(0), twoCIs(1), twoCIs(2)},
			sets:    map[string]int64{"gpu-2": 81559},
			uses:    map[string]string{"gpu-2-mig-2-0": "gpu-2:13398", "gpu-2-mig-2-1": "gpu-2:13397", "gpu-2-mig-2-2": "gpu-2:13397"},
			nSlices: 2},
		{name: "no MIG: plain devices", gpus: []agent.GPU{migGPUs()[4]}, sets: map[string]int64{}, uses: map[string]string{}, nSlices: 1},
		{name: "the GPU's memory unknown: plain devices", gpus: func() []agent.GPU {
			g := migGPUs()
			for i := range g[:4] {
				m := *g[i].MIG
				m.ParentMemoryMiB = 0
				g[i].MIG = &m
			}
			return g
		}(), sets: map[string]int64{}, uses: map[string]string{}, nSlices: 1, skipped: 1},
		{name: "instances holding more than the GPU: plain devices", gpus: func() []agent.GPU {
			g := migGPUs()
			g[0].MemoryMiB = 80000
			return g
		}(), sets: map[string]int64{}, uses: map[string]string{}, nSlices: 1, skipped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDriver(t, t.TempDir(), tc.gpus)
			pool := d.Resources().Pools["n1"]
			sets, uses := consumed(t, pool)
			assert.Equal(t, tc.sets, sets)
			assert.Equal(t, tc.uses, uses)
			assert.Len(t, pool.Slices, tc.nSlices)
			assert.Len(t, d.inv.counters.skipped, tc.skipped)
			n := 0
			for _, sl := range pool.Slices {
				n += len(sl.Devices)
			}
			assert.Equal(t, len(tc.gpus), n, "every device published")
		})
	}
}

// An API server without the feature drops the counters: the driver then
// publishes plain devices, once, and says so.
func TestResourcesPlainWhereCountersDropped(t *testing.T) {
	d := newTestDriver(t, t.TempDir(), migGPUs())
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0"}}}}
	actual := &resourceapi.ResourceSlice{}
	d.HandleError(context.Background(), fmt.Errorf("wrapped: %w", &resourceslice.DroppedFieldsError{PoolName: "n1", DesiredSlice: desired, ActualSlice: actual}), "publish")
	select {
	case <-d.republish:
	default:
		t.Fatal("no republish asked")
	}
	pool := d.Resources().Pools["n1"]
	require.Len(t, pool.Slices, 1)
	assert.Len(t, pool.Slices[0].Devices, 5)
	sets, uses := consumed(t, pool)
	assert.Empty(t, sets)
	assert.Empty(t, uses)
	// Another error is only logged.
	d.HandleError(context.Background(), fmt.Errorf("boom"), "publish")
	select {
	case <-d.republish:
		t.Fatal("republish asked again")
	default:
	}
}
