package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The fake MIG node (issue 41): GPU 0 partitioned, GPU 1 whole, as the
// node agent's inventory. Its MIG devices' capability files are character
// devices the lab makes; nothing opens them. GPU 0's layouts, named as
// NVIDIA's mig-parted would:
const (
	FakeMIGMixed = "e2e-mixed"   // 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb (GPU instances 1, 5, 9, 10)
	FakeMIGAll1g = "all-1g.10gb" // 7 × 1g.10gb (GPU instances 7 ... 13)

	// FakeMIGCap0 is the first capability file's number: GPU instance gi's
	// two files are nvidia-cap<FakeMIGCap0+2·gi> and the next one.
	FakeMIGCap0 = 100
	fakeMIGGIs  = 14 // capability files for GPU instances 0 ... 13
)

type fakeMIG struct {
	UUID      string   `json:"uuid"`
	Name      string   `json:"name"`
	GI        int      `json:"gi"`
	CI        int      `json:"ci"`
	Slices    int      `json:"slices"`
	MemoryMiB int      `json:"memoryMiB"`
	Caps      []string `json:"caps"`
}

type fakeMIGGPU struct {
	fakeGPU
	MIG []fakeMIG `json:"migDevices,omitempty"`
}

// MIGInventory is the fake MIG node's inventory with GPU 0 in layout
// (FakeMIGMixed, FakeMIGAll1g), its MIG devices listed out of order (the
// agent's order must not depend on it). Paths are under root (the chroot's
// own paths when root is ""), the capability files in dir/nvidia-caps.
func MIGInventory(root, dir, layout string) (string, error) {
	capOf := func(gi, which int) string {
		return fmt.Sprintf("%s%s/nvidia-caps/nvidia-cap%d", root, dir, FakeMIGCap0+2*gi+which)
	}
	m := func(gi int, profile string, slices, mem int) fakeMIG {
		return fakeMIG{UUID: fmt.Sprintf("MIG-e2e-%02d", gi), Name: FakeGPUName + " MIG " + profile, GI: gi, Slices: slices, MemoryMiB: mem,
			Caps: []string{capOf(gi, 0), capOf(gi, 1)}}
	}
	gpu := func(i int) fakeGPU {
		return fakeGPU{Index: i, Name: FakeGPUName, UUID: fmt.Sprintf("GPU-e2e-%d", i), Minor: i, MemoryMiB: fakeGPUMemoryMiB,
			Device: fmt.Sprintf("%s/var/lib/fakegpu/nvidia%d", root, i)}
	}
	var migs []fakeMIG
	switch layout {
	case FakeMIGMixed:
		migs = []fakeMIG{m(10, "1g.10gb", 1, 9856), m(1, "3g.40gb", 3, 40192), m(9, "1g.10gb", 1, 9856), m(5, "2g.20gb", 2, 19968)}
	case FakeMIGAll1g:
		for _, gi := range []int{13, 7, 12, 8, 11, 9, 10} {
			migs = append(migs, m(gi, "1g.10gb", 1, 9856))
		}
	default:
		return "", fmt.Errorf("fake MIG node: no layout %q (%s, %s)", layout, FakeMIGMixed, FakeMIGAll1g)
	}
	inv := struct {
		GPUs []fakeMIGGPU `json:"gpus"`
	}{GPUs: []fakeMIGGPU{{fakeGPU: gpu(0), MIG: migs}, {fakeGPU: gpu(1)}}}
	b, _ := json.Marshal(inv) // plain structs: cannot fail
	return string(b), nil
}

// WriteFakeMIGNode writes the fake MIG node, GPU 0 in layout, into dir, a
// directory of the chroot: dir/inv.json is the inventory a node agent in
// the chroot reads (`--gpu-inventory`, `--expected-gpus 2`), hostInv the
// same inventory with the host's paths. Written again with another layout,
// it is what NVIDIA's mig-manager would leave (the files are replaced
// whole: an agent never reads half of one). The caller removes
// filepath.Join(l.RootFS(), dir).
func (l *Lab) WriteFakeMIGNode(dir, layout string) (hostInv string, err error) {
	inChroot, err := MIGInventory("", dir, layout)
	if err != nil {
		return "", err
	}
	onHost, err := MIGInventory(l.RootFS(), dir, layout)
	if err != nil {
		return "", err
	}
	host := filepath.Join(l.RootFS(), dir)
	if err := os.MkdirAll(filepath.Join(host, "nvidia-caps"), 0o755); err != nil {
		return "", fmt.Errorf("fake MIG node: %w", err)
	}
	for gi := range fakeMIGGIs {
		for which := range 2 {
			n := FakeMIGCap0 + 2*gi + which
			p := filepath.Join(host, "nvidia-caps", fmt.Sprintf("nvidia-cap%d", n))
			// Character devices, as the kernel's capability files are (major
			// 195 like the lab's fake GPUs, minors under 256).
			if err := syscall.Mknod(p, syscall.S_IFCHR|0o444, 195<<8|(n+100)); err != nil && !os.IsExist(err) {
				return "", fmt.Errorf("fake MIG node: %s: %w", p, err)
			}
		}
	}
	if err := writeReplacing(filepath.Join(host, "inv.json"), inChroot); err != nil {
		return "", fmt.Errorf("fake MIG node: %w", err)
	}
	hostInv = filepath.Join(host, "host-inv.json")
	if err := writeReplacing(hostInv, onHost); err != nil {
		return "", fmt.Errorf("fake MIG node: %w", err)
	}
	return hostInv, nil
}

// writeReplacing writes path whole: a new file renamed over the old.
func writeReplacing(path, text string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
