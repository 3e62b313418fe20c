package dra

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// Partitionable devices (KEP-4815). A partitioned GPU is a counter set
// named after it (DeviceName of its minor) holding its whole memory
// (keys.GPUCounterMemory); each of its MIG devices consumes its share.
// The instances are those that exist (Slurm, the one allocator, registers a
// fixed layout), so all of them fit together: the counters say which
// devices share which GPU and how much of it each holds, in the form the
// API defines for it. A GPU instance's memory is shared by its compute
// instances: each consumes an equal part (the lowest compute instance id
// the remainder), so a GPU's consumptions add up to what its instances have.
//
// The API allows at most 8 counter sets per slice (ResourceSliceMaxCounterSets),
// a slice of counters holds no devices, and a slice whose devices consume
// counters at most 64 devices.

// counterPlan is the inventory's partitionable form.
type counterPlan struct {
	sets     []resourceapi.CounterSet
	consumes map[string][]resourceapi.DeviceCounterConsumption // by UnitName
	// skipped says, per GPU, why it has no counter set (its MIG devices are
	// then published without consumption).
	skipped []string
}

// planCounters is the counter sets of the partitioned GPUs among the units
// and what each MIG device consumes. A GPU whose whole memory is unknown,
// or whose instances say they hold more than it has, gets no counter set:
// a set that is not the truth would let the API's allocator refuse (or
// give) what it should not.
func planCounters(units []agent.GPU) counterPlan {
	type gpuInstance struct{ minor, gi int }
	byGPU := map[int][]agent.GPU{}
	cis := map[gpuInstance][]int{}
	for _, u := range units {
		if u.MIG == nil {
			continue
		}
		byGPU[u.Minor] = append(byGPU[u.Minor], u)
		k := gpuInstance{u.Minor, u.MIG.GI}
		cis[k] = append(cis[k], u.MIG.CI)
	}
	minors := make([]int, 0, len(byGPU))
	for m := range byGPU {
		minors = append(minors, m)
	}
	sort.Ints(minors)
	p := counterPlan{consumes: map[string][]resourceapi.DeviceCounterConsumption{}}
	for _, minor := range minors {
		set := DeviceName(minor)
		total := byGPU[minor][0].MIG.ParentMemoryMiB
		if total == 0 {
			p.skipped = append(p.skipped, fmt.Sprintf("GPU %s: NVML gave no memory size: no counter set", set))
			continue
		}
		share := map[string]uint64{}
		var sum uint64
		for _, u := range byGPU[minor] {
			ids := cis[gpuInstance{minor, u.MIG.GI}]
			n := uint64(len(ids))
			s := u.MemoryMiB / n
			if u.MIG.CI == lowest(ids) {
				s += u.MemoryMiB % n
			}
			share[UnitName(u)] = s
			sum += s
		}
		if sum > total {
			p.skipped = append(p.skipped, fmt.Sprintf("GPU %s: its MIG devices hold %d MiB of its %d MiB: no counter set", set, sum, total))
			continue
		}
		p.sets = append(p.sets, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{
			keys.GPUCounterMemory: {Value: mib(total)},
		}})
		for name, s := range share {
			p.consumes[name] = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{
				keys.GPUCounterMemory: {Value: mib(s)},
			}}}
		}
	}
	return p
}

func lowest(ids []int) int {
	m := ids[0]
	for _, id := range ids[1:] {
		m = min(m, id)
	}
	return m
}

func mib(n uint64) resource.Quantity { return *resource.NewQuantity(int64(n)<<20, resource.BinarySI) }

// Slice limits of resource.k8s.io/v1 (ResourceSliceMaxCounterSets,
// ResourceSliceMaxDevicesWithTaintsOrConsumesCounters, ResourceSliceMaxDevices).
const (
	maxCounterSetsPerSlice      = resourceapi.ResourceSliceMaxCounterSets
	maxConsumingDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithTaintsOrConsumesCounters
	maxDevicesPerSlice          = resourceapi.ResourceSliceMaxDevices
)

// plainSlices is the devices in slices of at most maxDevicesPerSlice.
func plainSlices(devs []resourceapi.Device) [][]resourceapi.Device {
	return chunk(devs, maxDevicesPerSlice)
}

// partitionableSlices is the counter sets (slices of counters only) and
// then the devices, the MIG ones consuming their GPU's counters.
func partitionableSlices(devs []resourceapi.Device, p counterPlan) (counters [][]resourceapi.CounterSet, devices [][]resourceapi.Device) {
	with := make([]resourceapi.Device, len(devs))
	for i, d := range devs {
		d.ConsumesCounters = p.consumes[d.Name]
		with[i] = d
	}
	return chunk(p.sets, maxCounterSetsPerSlice), chunk(with, maxConsumingDevicesPerSlice)
}

func chunk[T any](in []T, n int) [][]T {
	var out [][]T
	for len(in) > n {
		out = append(out, in[:n])
		in = in[n:]
	}
	if len(in) > 0 || len(out) == 0 {
		out = append(out, in)
	}
	return out
}
