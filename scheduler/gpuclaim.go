package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/onepool/onepool/keys"
)

// GPU claims: a pod whose spec.resourceClaims has an entry named
// keys.PodClaimGPUs gets, in that claim, exactly the GPUs Slurm gave its
// placeholder job on the pod's node. onepool writes the claim's allocation
// from the job's GRES indices and the node's ResourceSlice (the node agent
// publishes each device's gresIndex), reserves it for the pod, and only
// then lets the pod be bound. kube-scheduler's DynamicResources plugin is
// off in onepool's profile: Slurm is the one allocator.

// ErrGPUClaim is the class of every reason a GPU claim cannot be allocated
// from Slurm's answer; the pod is not bound and the event says which.
var ErrGPUClaim = errors.New("cannot allocate the GPU claim from Slurm's allocation")

// gpuClaimName is the ResourceClaim behind the pod's onepool GPU claim:
// the claim it names, or the one made from its template (pod status).
// ok is false when the pod has no such claim.
func gpuClaimName(pod *corev1.Pod) (name string, ok bool, err error) {
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name != keys.PodClaimGPUs {
			continue
		}
		if rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName, true, nil
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == rc.Name && st.ResourceClaimName != nil {
				return *st.ResourceClaimName, true, nil
			}
		}
		return "", true, fmt.Errorf("%w: the claim from template %q is not created yet", ErrGPUClaim, ptrString(rc.ResourceClaimTemplateName))
	}
	return "", false, nil
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// nodeDevice is one device a node publishes: its name and GRES type.
type nodeDevice struct{ name, gresType string }

// nodeDevices maps the GRES index of each of the node's GPUs (and MIG
// devices) to its device, from the node's ResourceSlices of onepool's
// driver (the pool's newest generation only: older slices are stale).
func nodeDevices(node string, rslices []*resourceapi.ResourceSlice) (map[int]nodeDevice, error) {
	var gen int64 = -1
	for _, s := range rslices {
		if s.Spec.Driver == keys.GPUDriverName && s.Spec.Pool.Name == node && s.Spec.Pool.Generation > gen {
			gen = s.Spec.Pool.Generation
		}
	}
	if gen < 0 {
		return nil, fmt.Errorf("%w: node %s publishes no ResourceSlice of %s (is the node agent's DRA driver running there?)", ErrGPUClaim, node, keys.GPUDriverName)
	}
	out := map[int]nodeDevice{}
	for _, s := range rslices {
		if s.Spec.Driver != keys.GPUDriverName || s.Spec.Pool.Name != node || s.Spec.Pool.Generation != gen {
			continue
		}
		for _, d := range s.Spec.Devices {
			a, ok := d.Attributes[keys.GPUAttrGresIndex]
			if !ok || a.IntValue == nil {
				return nil, fmt.Errorf("%w: device %s of node %s has no %s attribute", ErrGPUClaim, d.Name, node, keys.GPUAttrGresIndex)
			}
			i := int(*a.IntValue)
			if prev, dup := out[i]; dup {
				return nil, fmt.Errorf("%w: node %s publishes GRES index %d twice (%s, %s)", ErrGPUClaim, node, i, prev.name, d.Name)
			}
			nd := nodeDevice{name: d.Name}
			if t, ok := d.Attributes[keys.GPUAttrGresType]; ok && t.StringValue != nil {
				nd.gresType = *t.StringValue
			}
			out[i] = nd
		}
	}
	return out, nil
}

// planGPUAllocation is the claim's allocation on node from the job's GRES
// indices there. It refuses when the claim asks for another count or
// class, when an index has no published device or (gresType set: the
// pod's MIG profile) a device of another type, and when another claim in
// use (reserved for a pod) holds one of the devices.
func planGPUAllocation(node string, indexes []int, gresType string, rslices []*resourceapi.ResourceSlice, claim *resourceapi.ResourceClaim, others []*resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, error) {
	// Every request asks a count of onepool's class; Slurm's indices go
	// to them in order (one request per GPU container).
	var total int64
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly == nil || r.Exactly.DeviceClassName != keys.GPUDeviceClass ||
			(r.Exactly.AllocationMode != "" && r.Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount) || r.Exactly.Count < 1 {
			return nil, fmt.Errorf("%w: claim %s/%s: request %q must ask a count of device class %s", ErrGPUClaim, claim.Namespace, claim.Name, r.Name, keys.GPUDeviceClass)
		}
		total += r.Exactly.Count
	}
	if total == 0 {
		return nil, fmt.Errorf("%w: claim %s/%s has no request", ErrGPUClaim, claim.Namespace, claim.Name)
	}
	if total != int64(len(indexes)) {
		return nil, fmt.Errorf("%w: claim %s/%s asks for %d GPUs, Slurm gave the job %d on %s (IDX %s)", ErrGPUClaim, claim.Namespace, claim.Name, total, len(indexes), node, joinInts(indexes))
	}
	indexes = slices.Sorted(slices.Values(indexes))
	requestOf := make([]string, 0, len(indexes))
	for _, r := range claim.Spec.Devices.Requests {
		for range r.Exactly.Count {
			requestOf = append(requestOf, r.Name)
		}
	}
	devs, err := nodeDevices(node, rslices)
	if err != nil {
		return nil, err
	}
	held := map[string]string{} // device → claim holding it
	for _, o := range others {
		if o.UID == claim.UID || o.Status.Allocation == nil || len(o.Status.ReservedFor) == 0 {
			continue
		}
		for _, r := range o.Status.Allocation.Devices.Results {
			if r.Driver == keys.GPUDriverName && r.Pool == node && (r.AdminAccess == nil || !*r.AdminAccess) {
				held[r.Device] = o.Namespace + "/" + o.Name
			}
		}
	}
	out := make([]resourceapi.DeviceRequestAllocationResult, 0, len(indexes))
	for k, i := range indexes {
		nd, ok := devs[i]
		if !ok {
			return nil, fmt.Errorf("%w: Slurm gave GRES index %d on %s, which publishes no device with that index (indices %s)", ErrGPUClaim, i, node, joinInts(slices.Sorted(mapKeysInt(devs))))
		}
		d := nd.name
		if gresType != "" && nd.gresType != gresType {
			return nil, fmt.Errorf("%w: Slurm gave GRES index %d on %s, which is %s of type %q; the pod asks %q", ErrGPUClaim, i, node, d, nd.gresType, gresType)
		}
		if h, ok := held[d]; ok {
			return nil, fmt.Errorf("%w: %s on %s (GRES index %d) is allocated to claim %s, which is in use", ErrGPUClaim, d, node, i, h)
		}
		out = append(out, resourceapi.DeviceRequestAllocationResult{Request: requestOf[k], Driver: keys.GPUDriverName, Pool: node, Device: d})
	}
	return out, nil
}

// sameAllocation says whether a claim already holds exactly results: a
// repeated PreBind (a retry after a failed bind) changes nothing.
func sameAllocation(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) bool {
	if claim.Status.Allocation == nil {
		return false
	}
	have := claim.Status.Allocation.Devices.Results
	return len(have) == len(results) && !slices.ContainsFunc(results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return !slices.ContainsFunc(have, func(h resourceapi.DeviceRequestAllocationResult) bool {
			return h.Driver == r.Driver && h.Pool == r.Pool && h.Device == r.Device && h.Request == r.Request
		})
	})
}

func mapKeysInt[V any](m map[int]V) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
