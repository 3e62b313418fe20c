package dra

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

// Defaults for the kubelet's plugin directories.
const (
	DefaultPluginDir    = "/var/lib/kubelet/plugins/" + keys.GPUDriverName
	DefaultRegistrarDir = kubeletplugin.KubeletRegistryDir
)

// ControlDevices are the NVIDIA driver's device nodes a container needs
// beside its GPUs; only those present on the node are used.
var ControlDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}

// Config is the driver's setup.
type Config struct {
	// NodeName is the Kubernetes node (the pool and the slice's node).
	NodeName string
	Client   kubernetes.Interface
	// PluginDir holds the DRA socket and the prepared-claims state; it
	// must outlive the pod (a hostPath) and be the same path for the kubelet.
	PluginDir string
	// RegistrarDir is the kubelet's plugins_registry; "" runs without
	// registering with a kubelet (the socket is still served).
	RegistrarDir string
	// CDIDir is where the runtime reads CDI specs.
	CDIDir string
	// ControlDevices go with every GPU in the CDI spec (existing ones).
	ControlDevices []string
	// DriverFiles are the NVIDIA driver's libraries and tools every
	// container with GPUs gets (agent.DriverRoot.Files); none in a lab
	// without a driver.
	DriverFiles []agent.DriverFile
	// CDIHook is the node's path of NVIDIA's nvidia-cdi-hook: with
	// DriverFiles, each spec has it update the container's ld.so.cache
	// with their folder. "": no hook.
	CDIHook string
	// JobGPUs asks Slurm for a job's GPUs on this node: a claim is
	// prepared only if its devices are exactly those. nil: not checked.
	JobGPUs JobGPUs
	Log     *log.Logger
}

// Driver implements kubeletplugin.DRAPlugin for the node's GPUs.
type Driver struct {
	cfg Config
	inv *Inventory
	mu  sync.Mutex // guards the state file
	// plain is set once the API server dropped the partitionable form's
	// fields (DRAPartitionableDevices off): the devices go without counters.
	plain atomic.Bool
	// republish asks Serve to publish Resources again (plain set).
	republish chan struct{}
}

// New checks the prepared-claims state against the inventory: a claim that
// holds a GPU the node no longer has is logged (its pod keeps what it had;
// nothing new is given that GPU, since it is not published).
func New(cfg Config, inv *Inventory) (*Driver, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("DRA driver: the Kubernetes node name is required")
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = DefaultPluginDir
	}
	if cfg.CDIDir == "" {
		cfg.CDIDir = DefaultCDIDir
	}
	if err := os.MkdirAll(cfg.PluginDir, 0o750); err != nil {
		return nil, fmt.Errorf("DRA plugin dir: %w", err)
	}
	d := &Driver{cfg: cfg, inv: inv, republish: make(chan struct{}, 1)}
	for _, s := range inv.counters.skipped {
		d.logf("partitionable devices: %s", s)
	}
	st, err := loadState(cfg.PluginDir)
	if err != nil {
		return nil, err
	}
	for uid, pc := range st {
		for _, dev := range pc.Devices {
			if _, ok := inv.ByName[dev.Device]; !ok {
				d.logf("WARNING: claim %s/%s (uid %s) holds %s, which this node no longer has", pc.Namespace, pc.Name, uid, dev.Device)
			}
		}
	}
	return d, nil
}

func (d *Driver) logf(format string, a ...any) {
	if d.cfg.Log != nil {
		d.cfg.Log.Printf("dra: "+format, a...)
	}
}

// Resources is what the driver publishes: one pool named after the node.
// Without a partitioned GPU, or once the API server dropped the
// partitionable form, one slice with every device (plain devices); else
// the partitioned GPUs' counter sets in a slice of their own and the
// devices, the MIG ones consuming their GPU's counters (partitionable
// devices, counters.go).
func (d *Driver) Resources() resourceslice.DriverResources {
	var out []resourceslice.Slice
	if d.inv.Partitionable() && !d.plain.Load() {
		counters, devices := partitionableSlices(d.inv.Devices, d.inv.counters)
		for _, c := range counters {
			out = append(out, resourceslice.Slice{SharedCounters: c})
		}
		for _, devs := range devices {
			out = append(out, resourceslice.Slice{Devices: devs})
		}
	} else {
		for _, devs := range plainSlices(d.inv.Devices) {
			out = append(out, resourceslice.Slice{Devices: devs})
		}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.cfg.NodeName: {Slices: out}}}
}

// featurePartitionable is the API server's feature gate of KEP-4815.
const featurePartitionable = "DRAPartitionableDevices"

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := loadState(d.cfg.PluginDir)
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		_, before := st[claim.UID]
		pc, err := planPrepare(st, claim, d.cfg.NodeName, d.inv)
		if err == nil && !before {
			err = d.verifySlurm(ctx, claim, pc)
		}
		if err == nil {
			err = d.writeSpec(claim.UID, pc)
		}
		if err == nil {
			st[claim.UID] = pc
			err = saveState(d.cfg.PluginDir, st)
			if err != nil {
				delete(st, claim.UID)
			}
		}
		if err != nil {
			d.logf("prepare %s/%s: %v", claim.Namespace, claim.Name, err)
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		var res kubeletplugin.PrepareResult
		for _, dev := range pc.Devices {
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests: dev.Requests, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: []string{dev.CDIDeviceID},
			})
		}
		d.logf("prepared %s/%s: %v", claim.Namespace, claim.Name, deviceNames(pc))
		out[claim.UID] = res
	}
	return out, nil
}

// writeSpec (re)writes the claim's CDI spec: a repeat call after a lost
// file writes it again.
func (d *Driver) writeSpec(uid types.UID, pc PreparedClaim) error {
	gpus, idx := gpusOf(pc, d.inv)
	var control []string
	for _, c := range d.cfg.ControlDevices {
		if _, err := os.Stat(c); err == nil {
			control = append(control, c)
		}
	}
	return writeCDISpec(d.cfg.CDIDir, uid, buildCDISpec(uid, gpus, idx, control, d.cfg.DriverFiles, d.cfg.CDIHook))
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. A claim this
// node never prepared (or already unprepared) is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := loadState(d.cfg.PluginDir)
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		if err := removeCDISpec(d.cfg.CDIDir, c.UID); err != nil {
			out[c.UID] = err
			continue
		}
		pc, ok := st[c.UID]
		if !ok {
			out[c.UID] = nil
			continue
		}
		delete(st, c.UID)
		if err := saveState(d.cfg.PluginDir, st); err != nil {
			st[c.UID] = pc
			out[c.UID] = err
			continue
		}
		d.logf("unprepared %s/%s: %v", c.Namespace, c.Name, deviceNames(pc))
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: background errors
// (publishing the slice, the gRPC servers) are logged; the driver keeps
// serving, and slurmd is not stopped for them.
//
// The API server dropping the partitionable form's fields (the feature off,
// as on Kubernetes 1.35) is no error: the driver publishes plain devices
// instead, once.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), featurePartitionable) && d.inv.Partitionable() {
		if d.plain.CompareAndSwap(false, true) {
			d.logf("the API server does not serve partitionable devices (feature %s off): publishing the MIG devices without counters", featurePartitionable)
			select {
			case d.republish <- struct{}{}:
			default:
			}
		}
		return
	}
	d.logf("%s: %v", msg, err)
}

func deviceNames(pc PreparedClaim) []string {
	out := make([]string, len(pc.Devices))
	for i, dev := range pc.Devices {
		out[i] = dev.Device
	}
	return out
}

// Serve runs the driver until ctx ends: the DRA socket, registration with
// the kubelet (unless RegistrarDir is ""), and the node's ResourceSlice.
func Serve(ctx context.Context, d *Driver) error {
	if d.cfg.Client == nil {
		return errors.New("DRA driver: no Kubernetes client")
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(keys.GPUDriverName),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.KubeClient(d.cfg.Client),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.PluginDir),
	}
	if d.cfg.RegistrarDir == "" {
		opts = append(opts, kubeletplugin.RegistrationService(false))
	} else {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("DRA driver: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, d.Resources()); err != nil {
		return fmt.Errorf("DRA driver: publish ResourceSlice: %w", err)
	}
	d.logf("serving %d GPUs of node %s as %s (socket in %s; %d partitioned GPUs as counter sets)", len(d.inv.Devices), d.cfg.NodeName, keys.GPUDriverName, d.cfg.PluginDir, len(d.inv.counters.sets))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.republish:
			if err := helper.PublishResources(ctx, d.Resources()); err != nil {
				return fmt.Errorf("DRA driver: publish ResourceSlice: %w", err)
			}
		}
	}
}
