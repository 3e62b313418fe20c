package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDevices makes n device files in a temp dir, as the lab's fake GPUs.
func fakeDevices(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nvidia%d", i)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeInventory(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "inventory.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// inventoryJSON is n H100s on the fake devices in dir; extra is added to
// GPU 0's object.
func inventoryJSON(dir string, n int, extra map[int]string) string {
	var gs []string
	for i := 0; i < n; i++ {
		e := ""
		if extra[i] != "" {
			e = "," + extra[i]
		}
		gs = append(gs, fmt.Sprintf(`{"index":%d,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-%d","minor":%d,"memoryMiB":81559,"device":"%s/nvidia%d"%s}`, i, i, i, dir, i, e))
	}
	return `{"gpus":[` + strings.Join(gs, ",") + `]}`
}

func TestInventoryDiscover(t *testing.T) {
	dir := fakeDevices(t, 8)
	lib := NewLibrary(writeInventory(t, inventoryJSON(dir, 8, nil)))
	gpus, _, err := discover(context.Background(), lib)
	if err != nil {
		t.Fatal(err)
	}
	if got := GresString(gpus); got != "gpu:nvidia_h100_80gb_hbm3:8" {
		t.Errorf("Gres = %q", got)
	}
	if !strings.Contains(GresConf(gpus), "Name=gpu Type=nvidia_h100_80gb_hbm3 File="+dir+"/nvidia[0-7]\n") {
		t.Errorf("gres.conf:\n%s", GresConf(gpus))
	}
	if gpus[3].UUID != "GPU-3" || gpus[3].MemoryMiB != 81559 || gpus[3].Index != 3 {
		t.Errorf("GPU 3 = %+v", gpus[3])
	}
}

func TestInventoryValidation(t *testing.T) {
	dir := fakeDevices(t, 2)
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"missing device file", `{"gpus":[{"index":0,"name":"X","minor":0,"device":"` + dir + `/nvidia9"}]}`, "gpus[0]: device file"},
		{"default device missing", `{"gpus":[{"index":0,"name":"X","minor":250}]}`, "/dev/nvidia250"},
		{"duplicate index", `{"gpus":[{"index":0,"name":"X","device":"` + dir + `/nvidia0"},{"index":0,"name":"X","device":"` + dir + `/nvidia1"}]}`, "gpus[1]: duplicate index 0"},
		{"empty name", `{"gpus":[{"index":0,"name":"","device":"` + dir + `/nvidia0"}]}`, "gpus[0]: empty name"},
		{"duplicate device", `{"gpus":[{"index":0,"name":"X","device":"` + dir + `/nvidia0"},{"index":1,"name":"X","device":"` + dir + `/nvidia0"}]}`, "duplicate device"},
		{"typo'd field", `{"gpus":[{"index":0,"name":"X","device":"` + dir + `/nvidia0","temperatureF":80}]}`, "unknown field"},
		{"not JSON", `gpus: []`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewLibrary(writeInventory(t, tc.body)).Init()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Init() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
	if err := NewLibrary(filepath.Join(dir, "nope.json")).Init(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := NewLibrary(writeInventory(t, `{"gpus":[]}`)).Init(); err != nil {
		t.Errorf("empty inventory (a CPU node): %v", err)
	}
}

func TestInventoryHealth(t *testing.T) {
	dir := fakeDevices(t, 8)
	for _, tc := range []struct {
		name  string
		extra map[int]string
		n     int
		want  string
	}{
		{"healthy", nil, 8, ""},
		{"count", nil, 7, "onepool: gpu count: found 7 of 8"},
		{"xid", map[int]string{3: `"xids":[13,79]`}, 8, "onepool: gpu xid: 79 on GPU 3"},
		{"ecc", map[int]string{1: `"uncorrectableECC":2`}, 8, "onepool: gpu ecc: 2 uncorrectable on GPU 1"},
		{"retired pages", map[int]string{0: `"retiredPagesPending":true`}, 8, "onepool: gpu retired pages: pending on GPU 0"},
		{"row remap", map[int]string{6: `"rowRemapFailure":true`}, 8, "onepool: gpu row remap: failed on GPU 6"},
		{"temperature", map[int]string{5: `"temperatureC":92,"slowdownTemperatureC":90`}, 8, "onepool: gpu temperature: 92C on GPU 5 (slowdown 90C)"},
		{"zero values are healthy", map[int]string{2: `"uncorrectableECC":0,"retiredPagesPending":false,"temperatureC":40,"slowdownTemperatureC":90`}, 8, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := NewLibrary(writeInventory(t, inventoryJSON(dir, tc.n, tc.extra)))
			v := CheckHealth(context.Background(), lib, HealthConfig{ExpectedGPUs: 8, StateDir: t.TempDir()})
			if v.Reason() != tc.want {
				t.Errorf("reason = %q, want %q", v.Reason(), tc.want)
			}
		})
	}
}
