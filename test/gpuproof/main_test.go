package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeInventory is n H100s on regular files standing in for /dev/nvidiaN,
// with minors that are not their indexes (the GRES order follows the files).
func fakeInventory(t *testing.T, minors ...int) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	var gs []string
	for i, m := range minors {
		dev := filepath.Join(dir, fmt.Sprintf("nvidia%d", m))
		if err := os.WriteFile(dev, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		gs = append(gs, fmt.Sprintf(`{"index":%d,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-%d","minor":%d,"memoryMiB":81559,"device":%q}`, i, m, m, dev))
	}
	path = filepath.Join(dir, "inventory.json")
	if err := os.WriteFile(path, []byte(`{"gpus":[`+strings.Join(gs, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

func TestProofWithFakeInventory(t *testing.T) {
	for _, tt := range []struct {
		name    string
		minors  []int
		claimed []int // minors of the claimed GPUs
		want    []string
	}{
		{name: "one GPU", minors: []int{0}, claimed: []int{0}, want: []string{
			"Gres=gpu:nvidia_h100_80gb_hbm3:1\n",
			"gpu-id index=0 uuid=GPU-0 minor=0\n",
			"claim b for gpu-1 (no GPU with that minor on this node): refused:",
			"device not on this node (the node has gpu-0)",
		}},
		{name: "three GPUs, two claimed in GRES order", minors: []int{5, 2, 3}, claimed: []int{2, 3}, want: []string{
			"Gres=gpu:nvidia_h100_80gb_hbm3:3\n",
			"== Prepare claim gpuproof/a (uid gpuproof-claim-a): gpu-2,gpu-3\n",
			`"ONEPOOL_GRES_INDEXES=0,1"`,
			"claim b for gpu-6 (no GPU with that minor on this node): refused:",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inv, dir := fakeInventory(t, tt.minors...)
			var out bytes.Buffer
			code := run(context.Background(), options{inventory: inv, cdiDir: t.TempDir(), nodeName: "proof", count: 2}, &out)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out.String())
			}
			var nodes []string
			for _, m := range tt.claimed {
				nodes = append(nodes, filepath.Join(dir, fmt.Sprint("nvidia", m)))
			}
			want := append(tt.want,
				"GPU device nodes are exactly the claimed GPUs': "+strings.Join(nodes, " ")+"\n",
				"open O_RDWR by pid",
				"CDI spec carries no driver libraries (issue 37 item 3 not done)\n",
				"device already prepared for another claim gpuproof/a",
				"unprepared; CDI spec removed\n",
			)
			for _, w := range want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if !strings.HasSuffix(out.String(), "\nPROOF OK\n") {
				t.Errorf("last line is not PROOF OK:\n%s", out.String())
			}
		})
	}
}

func TestProofFailsClearly(t *testing.T) {
	inv, dir := fakeInventory(t, 0)
	var out bytes.Buffer
	if code := run(context.Background(), options{inventory: filepath.Join(dir, "missing.json"), nodeName: "proof", count: 1}, &out); code != 1 {
		t.Errorf("missing inventory: exit %d", code)
	}
	if !strings.Contains(out.String(), "PROOF FAIL: GPU discovery: GPU inventory: open ") {
		t.Errorf("missing inventory:\n%s", out.String())
	}

	// A device file that does not open read-write fails the proof (root
	// opens anything, so the file is replaced by a directory).
	out.Reset()
	dev := filepath.Join(dir, "nvidia0")
	if err := os.Remove(dev); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), options{inventory: inv, nodeName: "proof", count: 1}, &out); code != 1 {
		t.Errorf("unopenable device: exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "PROOF FAIL: open "+dev+" O_RDWR: ") {
		t.Errorf("unopenable device:\n%s", out.String())
	}
}
