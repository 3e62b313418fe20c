package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

const h100 = "NVIDIA H100 80GB HBM3"

// fakeGPUs are n GPUs listed out of order, with minors that are not their
// positions: the GRES index must come from the device order, not the list.
func fakeGPUs(minors ...int) []agent.GPU {
	var gpus []agent.GPU
	for _, m := range minors {
		gpus = append(gpus, agent.GPU{Index: len(gpus), Name: h100, UUID: "GPU-" + string(rune('a'+m)), Minor: m,
			MemoryMiB: 81559, Device: agent.DefaultDevice(m)})
	}
	return gpus
}

func TestInventoryGresIndexFollowsGresConf(t *testing.T) {
	gpus := fakeGPUs(7, 2, 10, 3)
	inv, err := NewInventory(gpus)
	require.NoError(t, err)
	// gres.conf lists /dev/nvidia2, 3, 7, 10 in that order: indices 0..3.
	assert.Contains(t, agent.GresConf(gpus), "File=/dev/nvidia[2-3]\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia7\n")
	want := map[string]int{"gpu-2": 0, "gpu-3": 1, "gpu-7": 2, "gpu-10": 3}
	assert.Equal(t, want, inv.GresIndex)
	for i, d := range inv.Devices {
		assert.Equal(t, int64(i), *d.Attributes[keys.GPUAttrGresIndex].IntValue, d.Name)
		g := inv.ByName[d.Name]
		assert.Equal(t, g.UUID, *d.Attributes[keys.GPUAttrUUID].StringValue)
		assert.Equal(t, int64(g.Minor), *d.Attributes[keys.GPUAttrMinor].IntValue)
		assert.Equal(t, h100, *d.Attributes[keys.GPUAttrProductName].StringValue)
		assert.Equal(t, "nvidia_h100_80gb_hbm3", *d.Attributes[keys.GPUAttrGresType].StringValue)
		mem := d.Capacity[keys.GPUCapacityMemory].Value
		assert.Equal(t, int64(81559)<<20, mem.Value())
	}
}

func TestInventoryRefusesDuplicateMinors(t *testing.T) {
	_, err := NewInventory(fakeGPUs(1, 1))
	assert.ErrorContains(t, err, "minor number 1")
}

func claim(uid, name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	if results != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	return c
}

func gpu(pool, dev string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: keys.GPUDriverName, Pool: pool, Device: dev}
}

func admin(r resourceapi.DeviceRequestAllocationResult) resourceapi.DeviceRequestAllocationResult {
	r.AdminAccess = ptr.To(true)
	return r
}

func TestPlanPrepare(t *testing.T) {
	inv, err := NewInventory(fakeGPUs(0, 1, 2, 3))
	require.NoError(t, err)
	held := State{"uid-a": {Namespace: "ns", Name: "a", Devices: []PreparedDevice{{Device: "gpu-1", Pool: "n1"}}}}
	heldAdmin := State{"uid-s": {Namespace: "slurm", Name: "slurmd", Devices: []PreparedDevice{{Device: "gpu-1", Pool: "n1", AdminAccess: true}}}}
	other := resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "net.example.com", Pool: "n1", Device: "eth1"}
	tests := []struct {
		name    string
		st      State
		claim   *resourceapi.ResourceClaim
		want    []string
		wantErr error
		errText string
	}{
		{name: "free devices", st: State{}, claim: claim("uid-b", "b", gpu("n1", "gpu-2"), gpu("n1", "gpu-3")), want: []string{"gpu-2", "gpu-3"}},
		{name: "other drivers' devices are not ours", st: State{}, claim: claim("uid-b", "b", other, gpu("n1", "gpu-0")), want: []string{"gpu-0"}},
		{name: "held by another claim", st: held, claim: claim("uid-b", "b", gpu("n1", "gpu-1")), wantErr: ErrDeviceBusy, errText: "ns/a"},
		{name: "repeat of the same claim", st: held, claim: claim("uid-a", "a", gpu("n1", "gpu-1")), want: []string{"gpu-1"}},
		{name: "admin beside a holder", st: held, claim: claim("uid-s", "slurmd", admin(gpu("n1", "gpu-1"))), want: []string{"gpu-1"}},
		{name: "holder beside an admin", st: heldAdmin, claim: claim("uid-b", "b", gpu("n1", "gpu-1")), want: []string{"gpu-1"}},
		{name: "device the node lacks", st: State{}, claim: claim("uid-b", "b", gpu("n1", "gpu-9")), wantErr: ErrUnknownDevice, errText: "gpu-0,gpu-1,gpu-2,gpu-3"},
		{name: "another node's pool", st: State{}, claim: claim("uid-b", "b", gpu("n2", "gpu-0")), wantErr: ErrUnknownDevice, errText: `pool "n2"`},
		{name: "one device twice in a claim", st: State{}, claim: claim("uid-b", "b", gpu("n1", "gpu-0"), gpu("n1", "gpu-0")), wantErr: ErrDeviceBusy},
		{name: "not allocated", st: State{}, claim: claim("uid-b", "b"), errText: "not allocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc, err := planPrepare(tt.st, tt.claim, "n1", inv)
			if tt.wantErr != nil || tt.errText != "" {
				require.Error(t, err)
				if tt.wantErr != nil {
					assert.ErrorIs(t, err, tt.wantErr)
				}
				assert.Contains(t, err.Error(), tt.errText)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, deviceNames(pc))
		})
	}
}

func newTestDriver(t *testing.T, pluginDir string, gpus []agent.GPU) *Driver {
	t.Helper()
	inv, err := NewInventory(gpus)
	require.NoError(t, err)
	d, err := New(Config{NodeName: "n1", PluginDir: pluginDir, CDIDir: filepath.Join(pluginDir, "cdi")}, inv)
	require.NoError(t, err)
	return d
}

func readSpec(t *testing.T, d *Driver, uid types.UID) cdiSpec {
	t.Helper()
	b, err := os.ReadFile(cdiSpecPath(d.cfg.CDIDir, uid))
	require.NoError(t, err)
	var s cdiSpec
	require.NoError(t, json.Unmarshal(b, &s))
	return s
}

func TestDriverPrepareUnprepare(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDriver(t, dir, fakeGPUs(4, 5, 6, 7))

	a := claim("uid-a", "a", gpu("n1", "gpu-6"), gpu("n1", "gpu-5"))
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a})
	require.NoError(t, err)
	require.NoError(t, res["uid-a"].Err)
	assert.Equal(t, []kubeletplugin.Device{
		{Requests: []string{"gpus"}, PoolName: "n1", DeviceName: "gpu-6", CDIDeviceIDs: []string{"onepool.dev/gpu=uid-a-gpu-6"}},
		{Requests: []string{"gpus"}, PoolName: "n1", DeviceName: "gpu-5", CDIDeviceIDs: []string{"onepool.dev/gpu=uid-a-gpu-5"}},
	}, res["uid-a"].Devices)

	// The CDI spec names exactly the claim's device nodes, in GRES order.
	spec := readSpec(t, d, "uid-a")
	assert.Equal(t, "onepool.dev/gpu", spec.Kind)
	var nodes []string
	for _, dev := range spec.Devices {
		for _, n := range dev.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
	}
	assert.Equal(t, []string{"/dev/nvidia5", "/dev/nvidia6"}, nodes)
	assert.Contains(t, spec.ContainerEdits.Env, "ONEPOOL_GRES_INDEXES=1,2")
	assert.Contains(t, spec.ContainerEdits.Env, "NVIDIA_VISIBLE_DEVICES=GPU-f,GPU-g")
	assert.Empty(t, spec.ContainerEdits.Mounts, "no driver files configured: no mounts")

	// A second claim for one of those devices is refused, the first's
	// spec untouched; a repeat of the first gets the same answer.
	b := claim("uid-b", "b", gpu("n1", "gpu-5"))
	res, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{b, a})
	require.NoError(t, err)
	assert.ErrorIs(t, res["uid-b"].Err, ErrDeviceBusy)
	require.NoError(t, res["uid-a"].Err)
	assert.Len(t, res["uid-a"].Devices, 2)
	assert.NoFileExists(t, cdiSpecPath(d.cfg.CDIDir, "uid-b"))

	// A restarted driver remembers what is prepared.
	d2 := newTestDriver(t, dir, fakeGPUs(4, 5, 6, 7))
	res, err = d2.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{b})
	require.NoError(t, err)
	assert.ErrorIs(t, res["uid-b"].Err, ErrDeviceBusy)

	// Unprepare frees the device (twice is fine), and b gets it.
	for range 2 {
		errs, err := d2.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-a", NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}})
		require.NoError(t, err)
		require.NoError(t, errs["uid-a"])
	}
	assert.NoFileExists(t, cdiSpecPath(d.cfg.CDIDir, "uid-a"))
	res, err = d2.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{b})
	require.NoError(t, err)
	require.NoError(t, res["uid-b"].Err)
}

func TestDriverRefusesUnreadableState(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, stateFile), []byte("{not json"), 0o600))
	inv, err := NewInventory(fakeGPUs(0))
	require.NoError(t, err)
	_, err = New(Config{NodeName: "n1", PluginDir: dir}, inv)
	assert.ErrorContains(t, err, stateFile)
}

func TestDriverGPUGoneWhileHeld(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDriver(t, dir, fakeGPUs(0, 1))
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-a", "a", gpu("n1", "gpu-1"))})
	require.NoError(t, err)
	require.NoError(t, res["uid-a"].Err)

	// gpu-1 is gone after a restart: it is not published, a new claim for
	// it is refused, and the holder can still be unprepared.
	d2 := newTestDriver(t, dir, fakeGPUs(0))
	assert.Len(t, d2.Resources().Pools["n1"].Slices[0].Devices, 1)
	res, err = d2.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-b", "b", gpu("n1", "gpu-1"))})
	require.NoError(t, err)
	assert.ErrorIs(t, res["uid-b"].Err, ErrUnknownDevice)
	errs, err := d2.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-a"}})
	require.NoError(t, err)
	assert.NoError(t, errs["uid-a"])
}

// With the driver's files, every claim's spec mounts them read-only where
// CUDA images look (LD_LIBRARY_PATH /usr/local/nvidia/lib64).
func TestDriverSpecCarriesTheDriversFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	inv, err := NewInventory(fakeGPUs(4, 5))
	require.NoError(t, err)
	files := []agent.DriverFile{
		{HostPath: "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.550.54.15", ContainerPath: "/usr/local/nvidia/lib64/libnvidia-ml.so.1"},
		{HostPath: "/run/nvidia/driver/usr/bin/nvidia-smi", ContainerPath: "/usr/local/nvidia/bin/nvidia-smi"},
	}
	d, err := New(Config{NodeName: "n1", PluginDir: dir, CDIDir: filepath.Join(dir, "cdi"), DriverFiles: files}, inv)
	require.NoError(t, err)
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-a", "a", gpu("n1", "gpu-5"))})
	require.NoError(t, err)
	require.NoError(t, res["uid-a"].Err)
	spec := readSpec(t, d, "uid-a")
	assert.Equal(t, []cdiMount{
		{HostPath: files[0].HostPath, ContainerPath: files[0].ContainerPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
		{HostPath: files[1].HostPath, ContainerPath: files[1].ContainerPath, Options: []string{"ro", "nosuid", "nodev", "bind"}},
	}, spec.ContainerEdits.Mounts)
}

// With nvidia-cdi-hook, the spec also runs its update-ldcache on the
// libraries' folder, as NVIDIA's CDI generator does; without the driver's
// files there is nothing to cache, and no hook.
func TestDriverSpecRunsTheLdcacheHook(t *testing.T) {
	ctx := context.Background()
	inv, err := NewInventory(fakeGPUs(4, 5))
	require.NoError(t, err)
	files := []agent.DriverFile{{HostPath: "/run/nvidia/driver/usr/lib64/libcuda.so.550.54.15", ContainerPath: "/usr/local/nvidia/lib64/libcuda.so.1"}}
	for _, tc := range []struct {
		name  string
		files []agent.DriverFile
		hook  string
		want  []cdiHook
	}{
		{"driver and hook", files, "/usr/local/nvidia/toolkit/nvidia-cdi-hook", []cdiHook{{HookName: "createContainer", Path: "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
			Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/local/nvidia/lib64"}}}},
		{"no hook", files, "", nil},
		{"no driver", nil, "/usr/bin/nvidia-cdi-hook", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := New(Config{NodeName: "n1", PluginDir: dir, CDIDir: filepath.Join(dir, "cdi"), DriverFiles: tc.files, CDIHook: tc.hook}, inv)
			require.NoError(t, err)
			res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-a", "a", gpu("n1", "gpu-5"))})
			require.NoError(t, err)
			require.NoError(t, res["uid-a"].Err)
			assert.Equal(t, tc.want, readSpec(t, d, "uid-a").ContainerEdits.Hooks)
		})
	}
}
