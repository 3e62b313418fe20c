package dra

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// migGPUs is issue 41's node as discovery returns it: GPU 0 partitioned
// 3g+2g+1g+1g, GPU 1 whole.
func migGPUs() []agent.GPU {
	unit := func(gi int, profile string, mem uint64) agent.GPU {
		return agent.GPU{Index: 0, Name: h100, UUID: fmt.Sprintf("MIG-%d", gi), Minor: 0, MemoryMiB: mem, Device: "/dev/nvidia0",
			MIG: &agent.MIG{ParentUUID: "GPU-0", GI: gi, Profile: profile,
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
