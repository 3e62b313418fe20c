package dra

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/agent"
)

// CDI names: a spec per prepared claim, kind onepool.dev/gpu, one CDI device
// per GPU named "<claim UID>-<device>" so a runtime's cached spec is never
// mistaken for a later claim's.
const (
	cdiVendor  = "onepool.dev"
	cdiClass   = "gpu"
	cdiKind    = cdiVendor + "/" + cdiClass
	cdiVersion = "0.5.0"
	// DefaultCDIDir is where container runtimes look for CDI specs.
	DefaultCDIDir = "/var/run/cdi"
)

// Env names the CDI spec sets in the container: which GPUs it was given.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES" // UUIDs (a MIG device's MIG-...), for images that use NVIDIA's container hook
	EnvGPUDevices     = "ONEPOOL_GPU_DEVICES"    // DRA device names, e.g. gpu-3,gpu-4
	EnvGresIndexes    = "ONEPOOL_GRES_INDEXES"   // Slurm's indices of those GPUs on the node
)

type cdiSpec struct {
	CDIVersion     string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
	Mounts      []cdiMount      `json:"mounts,omitempty"`
	Hooks       []cdiHook       `json:"hooks,omitempty"`
}

// cdiHook is an OCI hook the runtime runs (path on the node).
type cdiHook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
}

// ldcacheHook is what NVIDIA's CDI generator adds beside the driver's
// libraries: nvidia-cdi-hook (the NVIDIA Container Toolkit's, at hook on
// the node) updates the container's ld.so.cache with their folder at
// container creation, so an image that does not put it on LD_LIBRARY_PATH
// finds them too.
func ldcacheHook(hook string) cdiHook {
	return cdiHook{HookName: "createContainer", Path: hook, Args: []string{filepath.Base(hook), "update-ldcache", "--folder", agent.ContainerLibDir}}
}

// cdiMount is a bind mount of a file of the node's into the container.
type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
}

// driverMountOptions: the driver's files are the node's, read-only.
var driverMountOptions = []string{"ro", "nosuid", "nodev", "bind"}

type cdiDeviceNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
}

// cdiDeviceID is the fully qualified CDI name the kubelet hands the runtime.
func cdiDeviceID(claim types.UID, device string) string {
	return cdiKind + "=" + cdiDeviceName(claim, device)
}

func cdiDeviceName(claim types.UID, device string) string { return string(claim) + "-" + device }

// cdiSpecPath is the spec file of one claim.
func cdiSpecPath(dir string, claim types.UID) string {
	return filepath.Join(dir, cdiVendor+"-"+cdiClass+"_"+string(claim)+".json")
}

// buildCDISpec is the spec for one claim's GPUs (non-admin and admin
// alike: an admin claim sees the devices too). controlDevices (nvidiactl,
// nvidia-uvm, ...) go with every GPU, and the driver's libraries and tools
// with the container, where CUDA images look for them (no runtime hook
// needed; with hook, NVIDIA's nvidia-cdi-hook also puts them in the
// container's ld.so.cache). gpus are in GRES order.
func buildCDISpec(claim types.UID, gpus []agent.GPU, gresIdx []int, controlDevices []string, driver []agent.DriverFile, hook string) cdiSpec {
	spec := cdiSpec{CDIVersion: cdiVersion, Kind: cdiKind}
	var uuids, names, idx []string
	for i, g := range gpus {
		name := UnitName(g)
		nodes := []cdiDeviceNode{{Path: g.Device}}
		if g.MIG != nil { // the MIG device's GPU and compute instance
			for _, c := range g.MIG.Caps {
				nodes = append(nodes, cdiDeviceNode{Path: c})
			}
		}
		for _, c := range controlDevices {
			nodes = append(nodes, cdiDeviceNode{Path: c})
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: cdiDeviceName(claim, name), ContainerEdits: cdiEdits{DeviceNodes: nodes}})
		uuids = append(uuids, g.UUID)
		names = append(names, name)
		idx = append(idx, fmt.Sprint(gresIdx[i]))
	}
	spec.ContainerEdits.Env = []string{
		EnvVisibleDevices + "=" + strings.Join(uuids, ","),
		EnvGPUDevices + "=" + strings.Join(names, ","),
		EnvGresIndexes + "=" + strings.Join(idx, ","),
	}
	for _, f := range driver {
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, cdiMount{HostPath: f.HostPath, ContainerPath: f.ContainerPath, Options: driverMountOptions})
	}
	if hook != "" && len(driver) > 0 {
		spec.ContainerEdits.Hooks = []cdiHook{ldcacheHook(hook)}
	}
	return spec
}

func writeCDISpec(dir string, claim types.UID, spec cdiSpec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec dir: %w", err)
	}
	return agent.WriteFileAtomic(cdiSpecPath(dir, claim), append(b, '\n'), 0o644)
}

func removeCDISpec(dir string, claim types.UID) error {
	if err := os.Remove(cdiSpecPath(dir, claim)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	return nil
}
