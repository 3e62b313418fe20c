// Package dra is the node agent's DRA driver (keys.GPUDriverName): it
// publishes the node's GPUs in a ResourceSlice, each with its Slurm GRES
// index, and prepares the devices of the claims the kubelet asks for by
// writing a CDI spec that names exactly those device nodes.
package dra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// DeviceName is the DRA name of the GPU with this minor number, as the
// NVIDIA DRA driver names it ("gpu-<minor>"). It is a name only: the GRES
// index is the gresIndex attribute, never read from the name.
func DeviceName(minor int) string { return "gpu-" + strconv.Itoa(minor) }

// UnitName is the DRA name of a GRES unit: DeviceName of a whole GPU, and
// "gpu-<minor>-mig-<gi>-<ci>" for a MIG device (the GPU instance and
// compute instance ids, which stay while the layout does).
func UnitName(g agent.GPU) string {
	if g.MIG == nil {
		return DeviceName(g.Minor)
	}
	return fmt.Sprintf("%s-mig-%d-%d", DeviceName(g.Minor), g.MIG.GI, g.MIG.CI)
}

// Inventory is the node's GPUs as the driver serves them.
type Inventory struct {
	// ByName maps UnitName to the GPU (or MIG device).
	ByName map[string]agent.GPU
	// GresIndex maps UnitName to the unit's Slurm GRES index.
	GresIndex map[string]int
	// Devices is what the ResourceSlice publishes, in GRES order.
	Devices []resourceapi.Device
	// counters is the partitioned GPUs' counter sets (none without MIG).
	counters counterPlan
}

// Partitionable says whether the inventory has a partitionable form: a
// partitioned GPU with a counter set.
func (inv *Inventory) Partitionable() bool { return len(inv.counters.sets) > 0 }

// NewInventory maps the agent's GPUs to DRA devices in the order gres.conf
// lists them (agent.GresOrder), so the gresIndex each device publishes is
// the index Slurm gives it. Two GPUs with one minor number are an error: the
// device names would collide.
func NewInventory(gpus []agent.GPU) (*Inventory, error) {
	return NewInventoryInOrder(agent.GresOrder(gpus))
}

// NewInventoryInOrder is NewInventory for GPUs already in GRES order
// (agent.HostGresOrder: a node whose slurmd reads the host's gres.conf).
func NewInventoryInOrder(ordered []agent.GPU) (*Inventory, error) {
	inv := &Inventory{ByName: map[string]agent.GPU{}, GresIndex: map[string]int{}}
	for i, g := range ordered {
		name := UnitName(g)
		if prev, dup := inv.ByName[name]; dup {
			return nil, fmt.Errorf("GPUs %s and %s are both %s (minor number %d)", prev.UUID, g.UUID, name, g.Minor)
		}
		inv.ByName[name] = g
		inv.GresIndex[name] = i
		inv.Devices = append(inv.Devices, device(name, i, g))
	}
	inv.counters = planCounters(ordered)
	return inv, nil
}

func device(name string, gresIndex int, g agent.GPU) resourceapi.Device {
	d := resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			keys.GPUAttrGresIndex:   {IntValue: ptr.To(int64(gresIndex))},
			keys.GPUAttrMinor:       {IntValue: ptr.To(int64(g.Minor))},
			keys.GPUAttrUUID:        {StringValue: ptr.To(g.UUID)},
			keys.GPUAttrProductName: {StringValue: ptr.To(g.Name)},
			keys.GPUAttrGresType:    {StringValue: ptr.To(g.Type())},
		},
	}
	if g.MIG != nil {
		d.Attributes[keys.GPUAttrParentUUID] = resourceapi.DeviceAttribute{StringValue: ptr.To(g.MIG.ParentUUID)}
	}
	if g.MemoryMiB > 0 {
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			keys.GPUCapacityMemory: {Value: *resource.NewQuantity(int64(g.MemoryMiB)<<20, resource.BinarySI)},
		}
	}
	return d
}
