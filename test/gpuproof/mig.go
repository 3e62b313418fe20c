package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migSurvey prints, read-only, what NVML says about MIG on each GPU (issue
// 41): the MIG mode, the GPU instance profiles the GPU offers (name, slices,
// memory, possible placements), and where MIG is on, the instances that
// exist and their MIG devices' UUIDs, plus the kernel's MIG capability
// minors. It changes nothing (no mode switch, no instance made or destroyed:
// the device machine's settings are not ours to change). It is informative:
// it fails only when NVML itself cannot be read.
func migSurvey(out io.Writer) error {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %v", nvml.ErrorString(ret))
	}
	defer func() { _ = nvml.Shutdown() }()
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("device count: %v", nvml.ErrorString(ret))
	}
	for i := 0; i < count; i++ {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d: %v", i, nvml.ErrorString(ret))
		}
		name, _ := dev.GetName()
		uuid, _ := dev.GetUUID()
		fmt.Fprintf(out, "gpu %d %s %s\n", i, name, uuid)
		cur, pending, ret := dev.GetMigMode()
		if ret != nvml.SUCCESS {
			fmt.Fprintf(out, "  mig mode: %v (not MIG-capable)\n", nvml.ErrorString(ret))
			continue
		}
		fmt.Fprintf(out, "  mig mode: current=%s pending=%s\n", migMode(cur), migMode(pending))
		if n, ret := dev.GetMaxMigDeviceCount(); ret == nvml.SUCCESS {
			fmt.Fprintf(out, "  max MIG devices: %d\n", n)
		}
		fmt.Fprintf(out, "  %-4s %-12s %-6s %-9s %-10s %-4s %s\n", "ID", "PROFILE", "SLICES", "INSTANCES", "MEMORY", "SMS", "PLACEMENTS (start:size)")
		for p := 0; p < nvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
			info, ret := dev.GetGpuInstanceProfileInfoV(p).V2()
			if ret != nvml.SUCCESS {
				continue // a profile this GPU does not offer
			}
			places := "-"
			v1, ret := dev.GetGpuInstanceProfileInfo(p)
			if ret == nvml.SUCCESS {
				if pl, ret := dev.GetGpuInstancePossiblePlacements(&v1); ret == nvml.SUCCESS {
					var s []string
					for _, x := range pl {
						s = append(s, fmt.Sprintf("%d:%d", x.Start, x.Size))
					}
					places = strings.Join(s, " ")
				} else {
					places = "(" + nvml.ErrorString(ret) + ")"
				}
			}
			fmt.Fprintf(out, "  %-4d %-12s %-6d %-9d %-10s %-4d %s\n", info.Id, cString(info.Name[:]), info.SliceCount,
				info.InstanceCount, fmt.Sprintf("%d MiB", info.MemorySizeMB), info.MultiprocessorCount, places)
			if cur == nvml.DEVICE_MIG_ENABLE {
				migInstances(out, dev, &v1)
			}
		}
		if cur == nvml.DEVICE_MIG_ENABLE {
			migDevices(out, dev)
		}
	}
	if b, err := os.ReadFile("/proc/driver/nvidia-caps/mig-minors"); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fmt.Fprintf(out, "/proc/driver/nvidia-caps/mig-minors: %d lines, first: %s\n", len(lines), strings.Join(lines[:min(4, len(lines))], " | "))
	} else {
		fmt.Fprintf(out, "/proc/driver/nvidia-caps/mig-minors: %v\n", err)
	}
	return nil
}

func migInstances(out io.Writer, dev nvml.Device, info *nvml.GpuInstanceProfileInfo) {
	gis, ret := dev.GetGpuInstances(info)
	if ret != nvml.SUCCESS {
		fmt.Fprintf(out, "    instances: %v\n", nvml.ErrorString(ret))
		return
	}
	for _, gi := range gis {
		gi2, ret := gi.GetInfo()
		if ret == nvml.SUCCESS {
			fmt.Fprintf(out, "    instance id=%d placement=%d:%d\n", gi2.Id, gi2.Placement.Start, gi2.Placement.Size)
		}
	}
}

func migDevices(out io.Writer, dev nvml.Device) {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return
	}
	for j := 0; j < n; j++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, _ := mig.GetUUID()
		gi, _ := mig.GetGpuInstanceId()
		ci, _ := mig.GetComputeInstanceId()
		mem, _ := mig.GetMemoryInfo()
		fmt.Fprintf(out, "    mig device %d %s gi=%d ci=%d memory=%d MiB\n", j, uuid, gi, ci, mem.Total>>20)
	}
}

func migMode(m int) string {
	switch m {
	case nvml.DEVICE_MIG_ENABLE:
		return "enabled"
	case nvml.DEVICE_MIG_DISABLE:
		return "disabled"
	}
	return fmt.Sprint(m)
}

// cString is a NUL-terminated C string in a fixed array.
func cString(b []uint8) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
