package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
)

// The inventory file stands in for NVML in a lab without GPUs:
//
//	{"gpus":[{"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-...","minor":0,
//	          "memoryMiB":81559,"device":"/var/lib/fakegpu/nvidia0"}]}
//
// "device" overrides /dev/nvidia<minor> and must exist (Slurm refuses a GPU
// without a device file). "migDevices" turns MIG mode on with those MIG
// devices: {"uuid","name","gi","ci","slices","memoryMiB","caps":[GI's
// capability file, CI's]}, the files existing. Optional per-GPU fields let the lab show every
// health verdict: "temperatureC", "slowdownTemperatureC",
// "uncorrectableECC", "retiredPagesPending", "rowRemapFailure", "xids".
// Absent optional fields behave like NVML's NOT_SUPPORTED.
type inventoryFile struct {
	GPUs []inventoryGPU `json:"gpus"`
}

type inventoryGPU struct {
	GPU
	TemperatureC         *uint32  `json:"temperatureC,omitempty"`
	SlowdownTemperatureC *uint32  `json:"slowdownTemperatureC,omitempty"`
	UncorrectableECC     *uint64  `json:"uncorrectableECC,omitempty"`
	RetiredPagesPending  *bool    `json:"retiredPagesPending,omitempty"`
	RowRemapFailure      *bool    `json:"rowRemapFailure,omitempty"`
	XIDs                 []uint64 `json:"xids,omitempty"`
	// MIGDevices, when present, is MIG mode on with these MIG devices
	// ([]: on, none made); absent: MIG off.
	MIGDevices *[]MIGDevice `json:"migDevices,omitempty"`
}

// NewLibrary returns the GPU source for an inventory path: NVML when the path
// is empty, else the inventory file (NVML is then never loaded).
func NewLibrary(inventoryPath string) Library {
	if inventoryPath == "" {
		return NewNVML()
	}
	return &Inventory{Path: inventoryPath}
}

// Inventory is a Library backed by an inventory file, read and validated at
// Init.
type Inventory struct {
	Path string
	gpus []inventoryGPU // sorted by index
}

// LoadInventory reads and validates an inventory file.
func LoadInventory(path string) ([]inventoryGPU, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("GPU inventory: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a typo in a lab file should fail, not silently drop a check
	var f inventoryFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("GPU inventory %s: %w", path, err)
	}
	var errs []error
	seenIndex := map[int]bool{}
	seenUUID := map[string]bool{}
	seenDevice := map[string]bool{}
	for i := range f.GPUs {
		g := &f.GPUs[i]
		at := fmt.Sprintf("gpus[%d]", i)
		if g.Index < 0 || g.Minor < 0 {
			errs = append(errs, fmt.Errorf("%s: negative index or minor", at))
		}
		if seenIndex[g.Index] {
			errs = append(errs, fmt.Errorf("%s: duplicate index %d", at, g.Index))
		}
		seenIndex[g.Index] = true
		if g.Name == "" {
			errs = append(errs, fmt.Errorf("%s: empty name", at))
		}
		if g.UUID != "" && seenUUID[g.UUID] {
			errs = append(errs, fmt.Errorf("%s: duplicate uuid %s", at, g.UUID))
		}
		seenUUID[g.UUID] = true
		if g.Device == "" {
			g.Device = DefaultDevice(g.Minor)
		}
		if seenDevice[g.Device] {
			errs = append(errs, fmt.Errorf("%s: duplicate device %s", at, g.Device))
		}
		seenDevice[g.Device] = true
		if _, err := os.Stat(g.Device); err != nil {
			errs = append(errs, fmt.Errorf("%s: device file: %w", at, err))
		}
		if g.MIGDevices != nil {
			for j, m := range *g.MIGDevices {
				mat := fmt.Sprintf("%s.migDevices[%d]", at, j)
				if m.UUID == "" || seenUUID[m.UUID] {
					errs = append(errs, fmt.Errorf("%s: empty or duplicate uuid %q", mat, m.UUID))
				}
				seenUUID[m.UUID] = true
				if m.GI < 0 || m.CI < 0 || m.Slices < 1 {
					errs = append(errs, fmt.Errorf("%s: gi and ci must be ≥ 0 and slices ≥ 1", mat))
				}
				for _, c := range m.Caps {
					if _, err := os.Stat(c); err != nil {
						errs = append(errs, fmt.Errorf("%s: capability file: %w", mat, err))
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("GPU inventory %s: %w", path, err)
	}
	sort.Slice(f.GPUs, func(i, j int) bool { return f.GPUs[i].Index < f.GPUs[j].Index })
	return f.GPUs, nil
}

func (v *Inventory) Init() error {
	gpus, err := LoadInventory(v.Path)
	if err != nil {
		return err
	}
	v.gpus = gpus
	return nil
}

func (v *Inventory) Shutdown() error { return nil }

func (v *Inventory) DeviceCount() (int, error) { return len(v.gpus), nil }

func (v *Inventory) Device(i int) (Device, error) {
	if i < 0 || i >= len(v.gpus) {
		return nil, fmt.Errorf("GPU inventory: no device %d", i)
	}
	return inventoryDevice{v.gpus[i]}, nil
}

func (v *Inventory) NewXIDEventSet([]Device, func(Device, error)) (EventSet, error) {
	return nil, fmt.Errorf("GPU inventory has no XID events (put \"xids\" in the file): %w", ErrNotSupported)
}

type inventoryDevice struct{ g inventoryGPU }

func optional[T any](p *T) (T, error) {
	if p == nil {
		var zero T
		return zero, fmt.Errorf("not in the GPU inventory: %w", ErrNotSupported)
	}
	return *p, nil
}

func (d inventoryDevice) Index() (int, error)        { return d.g.Index, nil }
func (d inventoryDevice) Name() (string, error)      { return d.g.Name, nil }
func (d inventoryDevice) UUID() (string, error)      { return d.g.UUID, nil }
func (d inventoryDevice) Minor() (int, error)        { return d.g.Minor, nil }
func (d inventoryDevice) MemoryMiB() (uint64, error) { return d.g.MemoryMiB, nil }
func (d inventoryDevice) DevicePath() string         { return d.g.Device }
func (d inventoryDevice) RecordedXIDs() []uint64     { return d.g.XIDs }
func (d inventoryDevice) UncorrectableECC() (uint64, error) {
	return optional(d.g.UncorrectableECC)
}
func (d inventoryDevice) RetiredPagesPending() (bool, error) {
	return optional(d.g.RetiredPagesPending)
}
func (d inventoryDevice) RowRemap() (pending, failed bool, err error) {
	failed, err = optional(d.g.RowRemapFailure)
	return false, failed, err
}
func (d inventoryDevice) TemperatureC() (uint32, error) { return optional(d.g.TemperatureC) }
func (d inventoryDevice) MIGDevices() ([]MIGDevice, error) {
	if d.g.MIGDevices == nil {
		return nil, nil
	}
	return append([]MIGDevice{}, *d.g.MIGDevices...), nil
}
func (d inventoryDevice) SlowdownTemperatureC() (uint32, error) {
	return optional(d.g.SlowdownTemperatureC)
}

// devicePather is a Device that names its own device file (the inventory);
// NVML devices use /dev/nvidia<minor>.
type devicePather interface{ DevicePath() string }

// xidRecorder is a Device that carries its own XIDs (the inventory); NVML
// devices' XIDs come from the state file the run command writes.
type xidRecorder interface{ RecordedXIDs() []uint64 }
