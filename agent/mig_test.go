package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMIGType(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices int
		mem    uint64
		want   string
	}{
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 9856, "1g.10gb"},
		{"NVIDIA H100 80GB HBM3 MIG 3g.40gb", 3, 40192, "3g.40gb"},
		{"NVIDIA H200 MIG 1g.18gb+me", 1, 16384, "1g.18gb_me"}, // '+' is not kept
		{"NVIDIA A100-SXM4-40GB MIG 2g.10gb", 2, 9728, "2g.10gb"},
		{"MIG 7G.80GB", 7, 80000, "7g.80gb"},
		// No profile in the name: Slurm's formula, memory rounded to GB.
		{"NVIDIA H100 80GB HBM3", 1, 9856, "1g.10gb"},
		{"", 2, 20096, "2g.20gb"},
		{"NVIDIA X MIG ", 4, 4864, "4g.5gb"},
	} {
		assert.Equal(t, tc.want, MIGType(tc.name, tc.slices, tc.mem), tc.name)
	}
}

const migMinorsText = `config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi5/access 48
gpu0/gi5/ci0/access 49
gpu0/gi9/access 84
gpu0/gi9/ci0/access 85
gpu0/gi10/access 93
gpu0/gi10/ci0/access 94
gpu1/gi1/access 147
`

func TestMIGMinors(t *testing.T) {
	m, err := ParseMIGMinors(strings.NewReader(migMinorsText))
	require.NoError(t, err)
	caps, err := m.Caps("/dev/nvidia-caps", 0, 9, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"}, caps)
	_, err = m.Caps("/dev/nvidia-caps", 1, 1, 0) // the GI's entry, not the CI's
	assert.ErrorContains(t, err, "no entry gpu1/gi1/ci0/access")

	for _, bad := range []string{"gpu0/gi1/access\n", "gpu0/gi1/access x\n", "a 1 2\n", "gpu0/gi1/access -3\n"} {
		_, err := ParseMIGMinors(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
}

// migNode is issue 41's fake node: GPU 0 partitioned 3g+2g+1g+1g (NVML
// lists its MIG devices in no particular order), GPU 1 whole.
func migNode() []*fakeDev {
	devs := h100s(2)
	capsOf := func(gi, ci int) []string {
		return []string{fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 100+gi*2), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 101+gi*2)}
	}
	mig := func(gi int, profile string, slices int, mem uint64) MIGDevice {
		return MIGDevice{UUID: fmt.Sprintf("MIG-0000-%02d", gi), Name: "NVIDIA H100 80GB HBM3 MIG " + profile, GI: gi, CI: 0,
			Slices: slices, MemoryMiB: mem, Caps: capsOf(gi, 0)}
	}
	devs[0].migs = []MIGDevice{
		mig(10, "1g.10gb", 1, 9856), mig(1, "3g.40gb", 3, 40192), mig(9, "1g.10gb", 1, 9856), mig(5, "2g.20gb", 2, 19968),
	}
	return devs
}

func TestDiscoverMIG(t *testing.T) {
	lib := &fakeLib{devs: migNode()}
	gpus, err := Discover(context.Background(), lib)
	require.NoError(t, err)
	require.Len(t, gpus, 5, "four MIG devices and one whole GPU")
	require.NoError(t, CheckGPUCount(gpus, 2), "a partitioned GPU counts once")
	assert.ErrorContains(t, CheckGPUCount(gpus, 5), "found 2 GPUs, expected 5")

	assert.Equal(t, "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1,gpu:nvidia_h100_80gb_hbm3:1", GresString(gpus))
	assert.Equal(t, "# Written by onepool-node-agent at every start; edits are lost.\nAutoDetect=off\n"+
		"Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap118,/dev/nvidia-caps/nvidia-cap119\n"+
		"Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap120,/dev/nvidia-caps/nvidia-cap121\n"+
		"Name=gpu Type=2g.20gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap110,/dev/nvidia-caps/nvidia-cap111\n"+
		"Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap102,/dev/nvidia-caps/nvidia-cap103\n"+
		"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1\n", GresConf(gpus))

	// GRES index i is GresOrder's i: the 1g devices by GPU instance (9
	// before 10, whatever NVML's order), then 2g, 3g, the whole GPU.
	var order []string
	for _, g := range GresOrder(gpus) {
		if g.MIG == nil {
			order = append(order, g.UUID)
			continue
		}
		assert.Equal(t, "GPU-00000000", g.MIG.ParentUUID)
		assert.Equal(t, 0, g.Minor)
		assert.Equal(t, "/dev/nvidia0", g.Device)
		order = append(order, fmt.Sprintf("%s gi=%d", g.Type(), g.MIG.GI))
	}
	assert.Equal(t, []string{"1g.10gb gi=9", "1g.10gb gi=10", "2g.20gb gi=5", "3g.40gb gi=1", "GPU-00000001"}, order)

	// The same layout listed in another order registers the same way.
	devs := migNode()
	m := devs[0].migs
	devs[0].migs = []MIGDevice{m[3], m[2], m[1], m[0]}
	again, err := Discover(context.Background(), &fakeLib{devs: devs})
	require.NoError(t, err)
	assert.Equal(t, GresConf(gpus), GresConf(again))
}

func TestDiscoverMIGRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(d *fakeDev)
		want string
	}{
		{"MIG on, no instances", func(d *fakeDev) { d.migs = []MIGDevice{} }, ErrMIGNoInstances.Error()},
		{"NVML fails", func(d *fakeDev) { d.migErr = errors.New("nvmlDeviceGetMigMode: Unknown Error") }, "Unknown Error"},
		{"a cap missing", func(d *fakeDev) {
			d.migs = []MIGDevice{{UUID: "MIG-1", Name: "MIG 1g.10gb", GI: 1, Slices: 1, Caps: []string{"/dev/nvidia-caps/nvidia-cap1"}}}
		}, "1 capability files"},
		{"one instance twice", func(d *fakeDev) {
			c := []string{"a", "b"}
			d.migs = []MIGDevice{{UUID: "MIG-1", GI: 1, Caps: c}, {UUID: "MIG-2", GI: 1, Caps: c}}
		}, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := h100s(2)
			tc.set(devs[1])
			_, err := Discover(context.Background(), &fakeLib{devs: devs})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "GPU 1: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// A GPU that cannot do MIG is a whole GPU.
	devs := h100s(1)
	devs[0].migErr = fmt.Errorf("nvmlDeviceGetMigMode: %w", ErrNotSupported)
	gpus, err := Discover(context.Background(), &fakeLib{devs: devs})
	require.NoError(t, err)
	assert.Equal(t, "gpu:nvidia_h100_80gb_hbm3:1", GresString(gpus))
}

func TestInventoryMIG(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		return p
	}
	dev0, dev1 := touch("nvidia0"), touch("nvidia1")
	c1, c2, c3, c4 := touch("cap12"), touch("cap13"), touch("cap48"), touch("cap49")
	write := func(body string) string {
		p := filepath.Join(dir, "inv.json")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	good := fmt.Sprintf(`{"gpus":[
	  {"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-0","minor":0,"device":%q,"migDevices":[
	    {"uuid":"MIG-a","name":"NVIDIA H100 80GB HBM3 MIG 3g.40gb","gi":1,"ci":0,"slices":3,"memoryMiB":40192,"caps":[%q,%q]},
	    {"uuid":"MIG-b","name":"NVIDIA H100 80GB HBM3 MIG 4g.40gb","gi":5,"ci":0,"slices":4,"memoryMiB":40192,"caps":[%q,%q]}]},
	  {"index":1,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-1","minor":1,"device":%q}]}`, dev0, c1, c2, c3, c4, dev1)
	gpus, err := Discover(context.Background(), &Inventory{Path: write(good)})
	require.NoError(t, err)
	assert.Equal(t, "gpu:3g.40gb:1,gpu:4g.40gb:1,gpu:nvidia_h100_80gb_hbm3:1", GresString(gpus))
	assert.Contains(t, GresConf(gpus), "Name=gpu Type=3g.40gb MultipleFiles="+dev0+","+c1+","+c2+"\n")

	for name, body := range map[string]string{
		"a cap file missing":  strings.Replace(good, c4, filepath.Join(dir, "nope"), 1),
		"a MIG uuid twice":    strings.Replace(good, `"MIG-b"`, `"MIG-a"`, 1),
		"a MIG uuid of a GPU": strings.Replace(good, `"MIG-b"`, `"GPU-1"`, 1),
		"no slices":           strings.Replace(good, `"slices":4`, `"slices":0`, 1),
	} {
		_, err := Discover(context.Background(), &Inventory{Path: write(body)})
		assert.Error(t, err, name)
	}
}

// TestRealNVMLMIG runs the NVML code on go-nvml's mock: MIG mode, the MIG
// devices, their capability files from mig-minors.
func TestRealNVMLMIG(t *testing.T) {
	minors := filepath.Join(t.TempDir(), "mig-minors")
	require.NoError(t, os.WriteFile(minors, []byte(migMinorsText), 0o644))
	mig := func(uuid string, gi int, name string, slices uint32, mem uint64) *mock.Device {
		return &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc:              func() (string, nvml.Return) { return name, nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: slices, MemorySizeMB: mem}, nvml.SUCCESS
			},
		}
	}
	migs := map[int]*mock.Device{0: mig("MIG-x", 9, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 9856), 2: mig("MIG-y", 5, "NVIDIA H100 80GB HBM3 MIG 2g.20gb", 2, 19968)}
	mode := nvml.DEVICE_MIG_ENABLE
	parent := &mock.Device{
		GetMigModeFunc:           func() (int, int, nvml.Return) { return mode, mode, nvml.SUCCESS },
		GetMinorNumberFunc:       func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 7, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if m, ok := migs[i]; ok {
				return m, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	d := realDevice{d: parent, migMinors: minors, capsDir: "/dev/nvidia-caps"}
	got, err := d.MIGDevices()
	require.NoError(t, err)
	assert.Equal(t, []MIGDevice{
		{UUID: "MIG-x", Name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", GI: 9, Slices: 1, MemoryMiB: 9856, Caps: []string{"/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"}},
		{UUID: "MIG-y", Name: "NVIDIA H100 80GB HBM3 MIG 2g.20gb", GI: 5, Slices: 2, MemoryMiB: 19968, Caps: []string{"/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49"}},
	}, got)

	mode = nvml.DEVICE_MIG_DISABLE
	got, err = d.MIGDevices()
	require.NoError(t, err)
	assert.Nil(t, got, "MIG off: a whole GPU")

	mode = nvml.DEVICE_MIG_ENABLE
	d.migMinors = filepath.Join(t.TempDir(), "missing")
	_, err = d.MIGDevices()
	assert.ErrorContains(t, err, "MIG capability minors")

	parent.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	got, err = d.MIGDevices()
	require.NoError(t, err)
	assert.Nil(t, got, "a GPU without MIG")
}
