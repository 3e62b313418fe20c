package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// stateFile holds the claims this node has prepared, in the plugin's data
// directory (a hostPath that outlives the pod): the kubelet may ask to
// unprepare after a restart, and a device must never be prepared twice.
const stateFile = "prepared.json"

// PreparedDevice is one device of a prepared claim.
type PreparedDevice struct {
	Requests    []string `json:"requests"`
	Pool        string   `json:"pool"`
	Device      string   `json:"device"`
	AdminAccess bool     `json:"adminAccess,omitempty"`
	CDIDeviceID string   `json:"cdiDeviceID"`
}

// PreparedClaim is a claim whose devices this node has prepared.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

// State is every prepared claim, by claim UID.
type State map[types.UID]PreparedClaim

// ErrDeviceBusy means a device the claim is allocated is prepared for another
// claim that does not have admin access. The driver is the last line of
// defence against one GPU given to two workloads.
var ErrDeviceBusy = errors.New("device already prepared for another claim")

// ErrUnknownDevice means the claim names a device this node does not have (a GPU
// gone since the allocation, or a stale ResourceSlice).
var ErrUnknownDevice = errors.New("device not on this node")

// planPrepare decides what preparing claim means on this node: the devices
// of this driver allocated to it, checked against the inventory and against
// the claims already prepared. A claim prepared before gets the same answer
// (the kubelet repeats calls). It changes nothing.
func planPrepare(st State, claim *resourceapi.ResourceClaim, pool string, inv *Inventory) (PreparedClaim, error) {
	if prev, ok := st[claim.UID]; ok {
		return prev, nil
	}
	pc := PreparedClaim{Namespace: claim.Namespace, Name: claim.Name}
	if claim.Status.Allocation == nil {
		return pc, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != keys.GPUDriverName {
			continue
		}
		if r.Pool != pool {
			return pc, fmt.Errorf("claim %s/%s: device %s is from pool %q, this node's pool is %q: %w", claim.Namespace, claim.Name, r.Device, r.Pool, pool, ErrUnknownDevice)
		}
		if _, ok := inv.ByName[r.Device]; !ok {
			return pc, fmt.Errorf("claim %s/%s: %s: %w (the node has %s)", claim.Namespace, claim.Name, r.Device, ErrUnknownDevice, strings.Join(slices.Sorted(mapKeys(inv.ByName)), ","))
		}
		admin := r.AdminAccess != nil && *r.AdminAccess
		if !admin {
			if holder, ok := holderOf(st, r.Device, claim.UID); ok {
				return pc, fmt.Errorf("claim %s/%s: %s: %w %s/%s (uid %s)", claim.Namespace, claim.Name, r.Device, ErrDeviceBusy, holder.Namespace, holder.Name, holder.uid)
			}
		}
		i := slices.IndexFunc(pc.Devices, func(d PreparedDevice) bool { return d.Device == r.Device })
		if i >= 0 { // two requests of one claim may share a device only as admins
			if !admin || !pc.Devices[i].AdminAccess {
				return pc, fmt.Errorf("claim %s/%s: %s is allocated twice in one claim: %w", claim.Namespace, claim.Name, r.Device, ErrDeviceBusy)
			}
			pc.Devices[i].Requests = append(pc.Devices[i].Requests, r.Request)
			continue
		}
		pc.Devices = append(pc.Devices, PreparedDevice{
			Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device, AdminAccess: admin,
			CDIDeviceID: cdiDeviceID(claim.UID, r.Device),
		})
	}
	return pc, nil
}

type holder struct {
	PreparedClaim
	uid types.UID
}

// holderOf is the claim other than self that holds device without admin access.
func holderOf(st State, device string, self types.UID) (holder, bool) {
	for uid, pc := range st {
		if uid == self {
			continue
		}
		for _, d := range pc.Devices {
			if d.Device == device && !d.AdminAccess {
				return holder{pc, uid}, true
			}
		}
	}
	return holder{}, false
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// gpusOf is the claim's GPUs in GRES order, with their GRES indices.
func gpusOf(pc PreparedClaim, inv *Inventory) ([]agent.GPU, []int) {
	names := make([]string, 0, len(pc.Devices))
	for _, d := range pc.Devices {
		if _, ok := inv.ByName[d.Device]; ok {
			names = append(names, d.Device)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return inv.GresIndex[a] - inv.GresIndex[b] })
	gpus := make([]agent.GPU, len(names))
	idx := make([]int, len(names))
	for i, n := range names {
		gpus[i], idx[i] = inv.ByName[n], inv.GresIndex[n]
	}
	return gpus, idx
}

func loadState(dir string) (State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if os.IsNotExist(err) {
		return State{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prepared claims: %w", err)
	}
	st := State{}
	if err := json.Unmarshal(b, &st); err != nil {
		// Never start from nothing on a file we cannot read: every GPU
		// would look free. The admin decides (the error names the file).
		return nil, fmt.Errorf("prepared claims %s: %w", filepath.Join(dir, stateFile), err)
	}
	return st, nil
}

func saveState(dir string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return agent.WriteFileAtomic(filepath.Join(dir, stateFile), append(b, '\n'), 0o600)
}
