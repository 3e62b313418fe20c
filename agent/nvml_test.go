package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealNVMLWithoutDriver runs the real go-nvml binding: on a machine
// without libnvidia-ml.so.1 Init must fail with ErrNVMLMissing and every
// later call must fail cleanly instead of jumping to an unresolved symbol.
func TestRealNVMLWithoutDriver(t *testing.T) {
	lib := NewNVML()
	if _, err := lib.DeviceCount(); err == nil {
		t.Error("DeviceCount before Init succeeded")
	}
	err := lib.Init()
	if err == nil {
		_ = lib.Shutdown()
		t.Skip("this machine has an NVIDIA driver")
	}
	if !errors.Is(err, ErrNVMLMissing) {
		t.Fatalf("Init() = %v, want ErrNVMLMissing", err)
	}
	for _, want := range []string{"NVML not found", "libnvidia-ml.so.1", EnvGPUInventory} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := lib.DeviceCount(); err == nil {
		t.Error("DeviceCount after a failed Init succeeded")
	}
	if _, err := lib.Device(0); err == nil {
		t.Error("Device after a failed Init succeeded")
	}
	if _, err := lib.NewXIDEventSet(nil, nil); err == nil {
		t.Error("NewXIDEventSet after a failed Init succeeded")
	}
	if err := lib.Shutdown(); err != nil {
		t.Errorf("Shutdown after a failed Init: %v", err)
	}
}

func TestNVMLErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want error
	}{
		{nvml.ERROR_NOT_SUPPORTED, ErrNotSupported},
		{nvml.ERROR_TIMEOUT, ErrTimeout},
		{nvml.ERROR_LIBRARY_NOT_FOUND, ErrNVMLMissing},
	} {
		if err := nvmlError("x", tc.ret); !errors.Is(err, tc.want) {
			t.Errorf("nvmlError(%d) = %v, want %v", tc.ret, err, tc.want)
		}
	}
	if err := nvmlError("x", nvml.SUCCESS); err != nil {
		t.Errorf("SUCCESS = %v", err)
	}
	if err := nvmlError("nvmlDeviceGetName", nvml.ERROR_GPU_IS_LOST); err == nil || !strings.HasPrefix(err.Error(), "nvmlDeviceGetName: ") {
		t.Errorf("GPU_IS_LOST = %v", err)
	}
}
