package agent

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Errors a Library or Device returns; implementations wrap them with %w.
var (
	// ErrNVMLMissing: libnvidia-ml.so.1 could not be loaded (no driver).
	ErrNVMLMissing = errors.New("NVML not found: no NVIDIA driver on this node (libnvidia-ml.so.1); for a lab without GPUs set " + EnvGPUInventory)
	// ErrNotSupported: this GPU or driver does not have the query (ECC off,
	// no page retirement on Hopper, ...). Health checks skip it.
	ErrNotSupported = errors.New("not supported")
	// ErrTimeout: EventSet.Wait saw no event in time.
	ErrTimeout = errors.New("timed out")
)

// Library is the part of NVML the agent uses, so tests run on a fake and the
// lab runs on an inventory file. Calls may block (a GPU that fell off the bus
// makes NVML hang); callers bound them.
type Library interface {
	// Init must succeed before any other call; Shutdown only after it did.
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(index int) (Device, error)
	// NewXIDEventSet returns a set that reports critical XID errors of the
	// given devices. Devices that cannot report them are skipped (logged
	// through skipped); ErrNotSupported when none can.
	NewXIDEventSet(devs []Device, skipped func(Device, error)) (EventSet, error)
}

// Device is one GPU.
type Device interface {
	Index() (int, error)
	Name() (string, error)
	UUID() (string, error)
	Minor() (int, error)
	MemoryMiB() (uint64, error)
	// UncorrectableECC is the volatile (since driver load) count of
	// uncorrected ECC errors.
	UncorrectableECC() (uint64, error)
	RetiredPagesPending() (bool, error)
	// RowRemap reports a pending row remap (GPU reset needed to apply it)
	// and a failed one (no spare rows left: the GPU must be replaced).
	RowRemap() (pending, failed bool, err error)
	TemperatureC() (uint32, error)
	SlowdownTemperatureC() (uint32, error)
	// MIGDevices lists the GPU's MIG devices when its MIG mode is on (an
	// empty, non-nil slice when it has none); nil when MIG is off or the
	// GPU cannot do MIG.
	MIGDevices() ([]MIGDevice, error)
}

// XIDEvent is one critical XID error.
type XIDEvent struct {
	UUID string // GPU's UUID; empty when NVML could not name the GPU
	XID  uint64
}

// EventSet waits for XID events.
type EventSet interface {
	// Wait returns the next event, or ErrTimeout after timeout.
	Wait(timeout time.Duration) (XIDEvent, error)
	Free() error
}

// NewNVML returns the real NVML. It loads libnvidia-ml.so.1 only at Init, so
// the binary starts on machines without a driver.
func NewNVML() Library { return &realNVML{lib: nvml.New()} }

// NewNVMLFrom is the real NVML loaded from path (a driver root's
// libnvidia-ml.so.1 where the loader's search path does not reach it);
// "" is NewNVML.
func NewNVMLFrom(path string) Library {
	if path == "" {
		return NewNVML()
	}
	return &realNVML{lib: nvml.New(nvml.WithLibraryPath(path))}
}

type realNVML struct {
	lib nvml.Interface
	// initialized guards every call: go-nvml resolves the C symbols lazily,
	// and calling one after a failed Init jumps to an unresolved symbol
	// (SIGSEGV, not a Go panic that recover could catch).
	mu          sync.Mutex
	initialized bool
}

// nvmlError turns an NVML return code into an error, mapping the codes the
// agent acts on to its own sentinels.
func nvmlError(what string, ret nvml.Return) error {
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED:
		return fmt.Errorf("%s: %w", what, ErrNotSupported)
	case nvml.ERROR_TIMEOUT:
		return fmt.Errorf("%s: %w", what, ErrTimeout)
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ErrNVMLMissing
	}
	return fmt.Errorf("%s: %s", what, nvml.ErrorString(ret))
}

var errNotInitialized = errors.New("NVML not initialized")

func (r *realNVML) ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.initialized {
		return errNotInitialized
	}
	return nil
}

func (r *realNVML) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.initialized {
		return nil
	}
	if err := nvmlError("nvmlInit", r.lib.Init()); err != nil {
		return err
	}
	r.initialized = true
	return nil
}

func (r *realNVML) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.initialized {
		return nil
	}
	r.initialized = false
	return nvmlError("nvmlShutdown", r.lib.Shutdown())
}

func (r *realNVML) DeviceCount() (int, error) {
	if err := r.ready(); err != nil {
		return 0, err
	}
	n, ret := r.lib.DeviceGetCount()
	return n, nvmlError("nvmlDeviceGetCount", ret)
}

func (r *realNVML) Device(index int) (Device, error) {
	if err := r.ready(); err != nil {
		return nil, err
	}
	d, ret := r.lib.DeviceGetHandleByIndex(index)
	if err := nvmlError(fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", index), ret); err != nil {
		return nil, err
	}
	return realDevice{d: d, migMinors: DefaultMIGMinors, capsDir: DefaultCapsDir}, nil
}

func (r *realNVML) NewXIDEventSet(devs []Device, skipped func(Device, error)) (EventSet, error) {
	if err := r.ready(); err != nil {
		return nil, err
	}
	set, ret := r.lib.EventSetCreate()
	if err := nvmlError("nvmlEventSetCreate", ret); err != nil {
		return nil, err
	}
	registered := 0
	for _, d := range devs {
		rd, ok := d.(realDevice)
		if !ok {
			continue
		}
		if err := nvmlError("nvmlDeviceRegisterEvents", rd.d.RegisterEvents(nvml.EventTypeXidCriticalError, set)); err != nil {
			if skipped != nil {
				skipped(d, err)
			}
			continue
		}
		registered++
	}
	if registered == 0 {
		_ = set.Free() // no GPU registered: the set holds nothing
		return nil, fmt.Errorf("no GPU reports XID events: %w", ErrNotSupported)
	}
	return realEventSet{set}, nil
}

type realEventSet struct{ set nvml.EventSet }

func (s realEventSet) Wait(timeout time.Duration) (XIDEvent, error) {
	data, ret := s.set.Wait(uint32(timeout / time.Millisecond))
	if err := nvmlError("nvmlEventSetWait", ret); err != nil {
		return XIDEvent{}, err
	}
	ev := XIDEvent{XID: data.EventData}
	if data.Device != nil {
		// A nil handle (an XID not tied to one GPU) makes GetUUID fail,
		// not crash: NVML checks its arguments.
		if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
			ev.UUID = uuid
		}
	}
	return ev, nil
}

func (s realEventSet) Free() error { return nvmlError("nvmlEventSetFree", s.set.Free()) }

type realDevice struct {
	d nvml.Device
	// migMinors and capsDir: where a MIG device's capability files are
	// found (DefaultMIGMinors, DefaultCapsDir).
	migMinors, capsDir string
}

func (d realDevice) Index() (int, error) {
	i, ret := d.d.GetIndex()
	return i, nvmlError("nvmlDeviceGetIndex", ret)
}

func (d realDevice) Name() (string, error) {
	s, ret := d.d.GetName()
	return s, nvmlError("nvmlDeviceGetName", ret)
}

func (d realDevice) UUID() (string, error) {
	s, ret := d.d.GetUUID()
	return s, nvmlError("nvmlDeviceGetUUID", ret)
}

func (d realDevice) Minor() (int, error) {
	n, ret := d.d.GetMinorNumber()
	return n, nvmlError("nvmlDeviceGetMinorNumber", ret)
}

func (d realDevice) MemoryMiB() (uint64, error) {
	m, ret := d.d.GetMemoryInfo()
	return m.Total / (1 << 20), nvmlError("nvmlDeviceGetMemoryInfo", ret)
}

func (d realDevice) UncorrectableECC() (uint64, error) {
	n, ret := d.d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	return n, nvmlError("nvmlDeviceGetTotalEccErrors", ret)
}

func (d realDevice) RetiredPagesPending() (bool, error) {
	s, ret := d.d.GetRetiredPagesPendingStatus()
	return s == nvml.FEATURE_ENABLED, nvmlError("nvmlDeviceGetRetiredPagesPendingStatus", ret)
}

func (d realDevice) RowRemap() (pending, failed bool, err error) {
	_, _, pending, failed, ret := d.d.GetRemappedRows()
	return pending, failed, nvmlError("nvmlDeviceGetRemappedRows", ret)
}

func (d realDevice) TemperatureC() (uint32, error) {
	t, ret := d.d.GetTemperature(nvml.TEMPERATURE_GPU)
	return t, nvmlError("nvmlDeviceGetTemperature", ret)
}

func (d realDevice) SlowdownTemperatureC() (uint32, error) {
	t, ret := d.d.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN)
	return t, nvmlError("nvmlDeviceGetTemperatureThreshold", ret)
}

func (d realDevice) MIGDevices() ([]MIGDevice, error) {
	cur, _, ret := d.d.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil, nil // no MIG on this GPU
	}
	if err := nvmlError("nvmlDeviceGetMigMode", ret); err != nil {
		return nil, err
	}
	if cur != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	minor, err := d.Minor()
	if err != nil {
		return nil, err
	}
	n, ret := d.d.GetMaxMigDeviceCount()
	if err := nvmlError("nvmlDeviceGetMaxMigDeviceCount", ret); err != nil {
		return nil, err
	}
	var minors MIGMinors
	out := []MIGDevice{}
	for j := range n {
		mig, ret := d.d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // no MIG device at this index
		}
		if err := nvmlError(fmt.Sprintf("nvmlDeviceGetMigDeviceHandleByIndex(%d)", j), ret); err != nil {
			return nil, err
		}
		m, err := describeMIG(mig)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", j, err)
		}
		if minors == nil {
			if minors, err = ReadMIGMinors(d.migMinors); err != nil {
				return nil, err
			}
		}
		if m.Caps, err = minors.Caps(d.capsDir, minor, m.GI, m.CI); err != nil {
			return nil, fmt.Errorf("MIG device %s: %w", m.UUID, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// describeMIG reads one MIG device's identity and profile.
func describeMIG(mig nvml.Device) (MIGDevice, error) {
	var m MIGDevice
	var ret nvml.Return
	if m.UUID, ret = mig.GetUUID(); ret != nvml.SUCCESS {
		return m, nvmlError("nvmlDeviceGetUUID", ret)
	}
	if m.Name, ret = mig.GetName(); ret != nvml.SUCCESS {
		return m, nvmlError("nvmlDeviceGetName", ret)
	}
	if m.GI, ret = mig.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return m, nvmlError("nvmlDeviceGetGpuInstanceId", ret)
	}
	if m.CI, ret = mig.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return m, nvmlError("nvmlDeviceGetComputeInstanceId", ret)
	}
	attr, ret := mig.GetAttributes()
	if ret != nvml.SUCCESS {
		return m, nvmlError("nvmlDeviceGetAttributes", ret)
	}
	m.Slices, m.MemoryMiB = int(attr.GpuInstanceSliceCount), attr.MemorySizeMB
	return m, nil
}
