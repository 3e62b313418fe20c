package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/agent"
)

func inventory(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var gs []string
	for i := 0; i < n; i++ {
		dev := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
		require.NoError(t, os.WriteFile(dev, nil, 0o666))
		gs = append(gs, fmt.Sprintf(`{"index":%d,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-%d","minor":%d,"memoryMiB":81559,"device":%q}`, i, i, i, dev))
	}
	p := filepath.Join(dir, "inventory.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"gpus":[`+strings.Join(gs, ",")+`]}`), 0o644))
	return p
}

func TestDetectFlagsAndEnv(t *testing.T) {
	inv := inventory(t, 8)
	t.Setenv("ONEPOOL_GPU_INVENTORY", inv)
	t.Setenv("ONEPOOL_SLURM_CPUS", "16")
	t.Setenv("ONEPOOL_SLURM_REAL_MEMORY_MB", "not-a-number") // overridden by the flag below
	t.Setenv("ONEPOOL_SLURM_FEATURES", "env-feature")
	var out, errs bytes.Buffer
	code := realMain([]string{"detect", "--real-memory-mb", "64000", "--features", "flag-feature", "--slurmd-port", "17010"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{
		"Gres=gpu:nvidia_h100_80gb_hbm3:8\n",
		"Conf=CPUs=16 RealMemory=64000 Gres=gpu:nvidia_h100_80gb_hbm3:8 Feature=flag-feature Port=17010\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBadEnvValue(t *testing.T) {
	t.Setenv("ONEPOOL_GPU_INVENTORY", inventory(t, 1))
	t.Setenv("ONEPOOL_SLURM_CPUS", "lots")
	var out, errs bytes.Buffer
	if code := realMain([]string{"detect"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), `ONEPOOL_SLURM_CPUS="lots"`) {
		t.Errorf("exit %d, stderr %q", code, errs.String())
	}
}

func TestDetectWithoutNVML(t *testing.T) {
	t.Setenv("ONEPOOL_GPU_INVENTORY", "")
	var out, errs bytes.Buffer
	code := realMain([]string{"detect"}, &out, &errs)
	if code == 0 {
		t.Skip("this machine has an NVIDIA driver")
	}
	if !strings.Contains(errs.String(), "NVML not found") || !strings.Contains(errs.String(), "ONEPOOL_GPU_INVENTORY") {
		t.Errorf("exit %d, stderr %q", code, errs.String())
	}
}

func TestHealthDryRun(t *testing.T) {
	var out, errs bytes.Buffer
	code := realMain([]string{"health", "--dry-run", "--gpu-inventory", inventory(t, 7), "--expected-gpus", "8", "--state-dir", t.TempDir()}, &out, &errs)
	if code != 1 || out.String() != "unhealthy: onepool: gpu count: found 7 of 8 (dry run: not draining)\n" {
		t.Errorf("exit %d, out %q, stderr %q", code, out.String(), errs.String())
	}
	out.Reset()
	code = realMain([]string{"health", "--dry-run", "--gpu-inventory", inventory(t, 8), "--expected-gpus", "8", "--state-dir", t.TempDir()}, &out, &errs)
	if code != 0 || out.String() != "healthy: 8 GPUs\n" {
		t.Errorf("exit %d, out %q", code, out.String())
	}
	if code := realMain([]string{"health", "--fatal-xids", "79,x"}, &out, &errs); code != 2 {
		t.Errorf("bad --fatal-xids: exit %d", code)
	}
}

func TestUsage(t *testing.T) {
	var out, errs bytes.Buffer
	if code := realMain(nil, &out, &errs); code != 2 {
		t.Errorf("no command: exit %d", code)
	}
	if code := realMain([]string{"bogus"}, &out, &errs); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
	if code := realMain([]string{"run", "-h"}, &out, &errs); code != 0 || !strings.Contains(errs.String(), "ONEPOOL_SLURM_NODE_NAME") {
		t.Errorf("run -h: exit %d, %q", code, errs.String())
	}
}

// The dra command alone: it needs the Slurm node's name, and refuses to
// publish a node that lost a GPU (it would offer claims the wrong devices).
func TestDRACommandRefusesBeforeServing(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	t.Setenv("ONEPOOL_SLURM_NODE_NAME", "")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no Slurm node name", []string{"dra", "--kubeconfig", kubeconfig}, 2, "the Slurm node is required: --node-name"},
		{"its Node unreadable", []string{"dra", "--kube-node-name", "node-7", "--kubeconfig", kubeconfig}, 1, "the Slurm node of Node node-7"},
		{"no Kubernetes config", []string{"dra", "--node-name", "gpu-0", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, 2, "DRA driver: Kubernetes config"},
		{"a GPU missing", []string{"dra", "--node-name", "gpu-0", "--kubeconfig", kubeconfig, "--gpu-inventory", inventory(t, 7), "--expected-gpus", "8"}, 1, "found 7 GPUs, expected 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			assert.Equal(t, tc.code, realMain(tc.args, &out, &errs), errs.String())
			assert.Contains(t, errs.String(), tc.says)
		})
	}
}

// --driver-root: none by default; a root without NVML stops the driver
// (a driver not there yet), and the files are named as the node has them.
func TestDRADriverRoot(t *testing.T) {
	files, err := draFlags{}.driverFiles()
	if err != nil || files != nil {
		t.Errorf("no --driver-root: %v %v", files, err)
	}
	if _, err := (draFlags{driverRoot: t.TempDir()}).driverFiles(); !errors.Is(err, agent.ErrNoDriverLibs) {
		t.Errorf("a root without NVML: %v", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "usr/lib64")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libnvidia-ml.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err = draFlags{driverRoot: "/run/nvidia/driver", driverRootDir: dir}.driverFiles()
	if err != nil || len(files) != 1 || files[0].HostPath != "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1" {
		t.Errorf("files %+v, %v", files, err)
	}
}
