package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSlurmd writes a script that records its argv (one per line) and
// SLURM_CONF into dir, then runs body.
func fakeSlurmd(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "slurmd")
	script := "#!/bin/sh\n" +
		"for a in \"$@\"; do printf '%s\\n' \"$a\"; done > " + dir + "/args\n" +
		"printf '%s\\n' \"$SLURM_CONF\" > " + dir + "/slurm_conf\n" +
		body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runEnv is a shared slurm conf dir (as the lab's /etc/slurm) and a run
// config with this node's own conf dir.
func runEnv(t *testing.T, slurmdBody string) (RunConfig, string) {
	t.Helper()
	dir := t.TempDir()
	shared := filepath.Join(dir, "etc-slurm")
	require.NoError(t, os.MkdirAll(filepath.Join(shared, "plugstack.conf.d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(shared, "slurm.conf"), []byte("ClusterName=lab\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(shared, "cgroup.conf"), []byte("CgroupPlugin=disabled\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(shared, "gres.conf"), []byte("NodeName=gpu-[0-3] Name=gpu Type=h100 File=/x[0-7]\n"), 0o644))
	return RunConfig{
		NodeConfig:   NodeConfig{CPUs: 4, RealMemoryMB: 16000, Features: []string{"lab", "h100"}, SlurmdPort: 17010, ExpectedGPUs: 8},
		NodeName:     "gpu-0",
		Slurmd:       fakeSlurmd(t, dir, slurmdBody),
		SlurmdArgs:   []string{"-vvv"},
		SlurmConfDir: shared,
		ConfDir:      filepath.Join(dir, "nodes", "gpu-0"),
		StateDir:     filepath.Join(dir, "state"),
		Log:          log.New(io.Discard, "", 0),
	}, dir
}

func TestRun(t *testing.T) {
	cfg, dir := runEnv(t, "exit 0")
	var logs bytes.Buffer
	cfg.Log = log.New(&logs, "", 0)
	code, err := Run(context.Background(), cfg, &fakeLib{devs: h100s(8)})
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	wantArgs := "-D\n-Z\n-N\ngpu-0\n--conf\nCPUs=4 RealMemory=16000 Gres=gpu:nvidia_h100_80gb_hbm3:8 Feature=lab,h100 Port=17010\n-vvv\n"
	if string(args) != wantArgs {
		t.Errorf("slurmd argv:\n%s\nwant\n%s", args, wantArgs)
	}
	slurmConf, _ := os.ReadFile(filepath.Join(dir, "slurm_conf"))
	if want := cfg.ConfDir + "/slurm.conf\n"; string(slurmConf) != want {
		t.Errorf("SLURM_CONF = %q, want %q", slurmConf, want)
	}
	gres, err := os.ReadFile(filepath.Join(cfg.ConfDir, "gres.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(gres), "AutoDetect=off\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0-7]\n") {
		t.Errorf("gres.conf:\n%s", gres)
	}
	if fi, _ := os.Stat(filepath.Join(cfg.ConfDir, "gres.conf")); fi.Mode().Perm() != 0o644 || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("gres.conf mode %v", fi.Mode())
	}
	shared, _ := os.ReadFile(filepath.Join(cfg.SlurmConfDir, "gres.conf"))
	if !strings.HasPrefix(string(shared), "NodeName=gpu-[0-3]") {
		t.Error("the shared gres.conf was changed")
	}
	for _, name := range []string{"slurm.conf", "cgroup.conf", "plugstack.conf.d"} {
		target, err := os.Readlink(filepath.Join(cfg.ConfDir, name))
		if err != nil || target != filepath.Join(cfg.SlurmConfDir, name) {
			t.Errorf("%s: link to %q, %v", name, target, err)
		}
	}
	for _, want := range []string{"Gres=gpu:nvidia_h100_80gb_hbm3:8", `--conf "CPUs=4 RealMemory=16000 Gres=gpu:nvidia_h100_80gb_hbm3:8 Feature=lab,h100 Port=17010"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// A second start finds the links in place and rewrites gres.conf.
	if code, err := Run(context.Background(), cfg, &fakeLib{devs: h100s(8)}); err != nil || code != 0 {
		t.Fatalf("second Run = %d, %v", code, err)
	}
}

func TestRunSameConfDir(t *testing.T) {
	cfg, dir := runEnv(t, "exit 3")
	cfg.ConfDir = ""
	cfg.ExpectedGPUs = 0
	code, err := Run(context.Background(), cfg, &fakeLib{devs: h100s(2)})
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v; want slurmd's exit code 3", code, err)
	}
	gres, _ := os.ReadFile(filepath.Join(cfg.SlurmConfDir, "gres.conf"))
	if !strings.Contains(string(gres), "File=/dev/nvidia[0-1]\n") {
		t.Errorf("gres.conf:\n%s", gres)
	}
	slurmConf, _ := os.ReadFile(filepath.Join(dir, "slurm_conf"))
	if want := cfg.SlurmConfDir + "/slurm.conf\n"; string(slurmConf) != want {
		t.Errorf("SLURM_CONF = %q, want %q", slurmConf, want)
	}
}

func TestRunCPUNode(t *testing.T) {
	cfg, dir := runEnv(t, "exit 0")
	cfg.ExpectedGPUs = 0
	var logs bytes.Buffer
	cfg.Log = log.New(&logs, "", 0)
	if code, err := Run(context.Background(), cfg, &fakeLib{}); err != nil || code != 0 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if !strings.Contains(string(args), "\nCPUs=4 RealMemory=16000 Feature=lab,h100 Port=17010\n") {
		t.Errorf("argv:\n%s", args)
	}
	if !strings.Contains(logs.String(), "NO GPUs FOUND") {
		t.Errorf("no loud warning:\n%s", logs.String())
	}
	gres, _ := os.ReadFile(filepath.Join(cfg.ConfDir, "gres.conf"))
	if strings.Contains(string(gres), "Name=gpu") {
		t.Errorf("gres.conf of a CPU node:\n%s", gres)
	}
}

func TestRunRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lib     *fakeLib
		mutate  func(*RunConfig)
		wantErr string
		is      error
	}{
		{name: "count mismatch", lib: &fakeLib{devs: h100s(7)}, wantErr: "found 7 GPUs, expected 8"},
		{name: "NVML missing", lib: &fakeLib{initErr: ErrNVMLMissing}, wantErr: "NVML not found", is: ErrNVMLMissing},
		{name: "no node name", lib: &fakeLib{devs: h100s(8)}, mutate: func(c *RunConfig) { c.NodeName = "" }, wantErr: "node name is required"},
		{name: "bad node name", lib: &fakeLib{devs: h100s(8)}, mutate: func(c *RunConfig) { c.NodeName = "gpu[0-1]" }, wantErr: "want a DNS name"},
		{name: "bad feature", lib: &fakeLib{devs: h100s(8)}, mutate: func(c *RunConfig) { c.Features = []string{"a b"} }, wantErr: "feature"},
		{name: "bad port", lib: &fakeLib{devs: h100s(8)}, mutate: func(c *RunConfig) { c.SlurmdPort = 70000 }, wantErr: "port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, dir := runEnv(t, "exit 0")
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			_, err := Run(context.Background(), cfg, tc.lib)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run error %v, want %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if _, err := os.Stat(filepath.Join(dir, "args")); err == nil {
				t.Error("slurmd was started")
			}
		})
	}
}

// waitFile waits for path to contain want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s never contained %q: %q", path, want, b)
}

const waitForTerm = `trap 'exit 7' TERM HUP
echo ready > "$(dirname "$0")/ready"
while :; do sleep 0.05; done`

func TestRunForwardsSignals(t *testing.T) {
	cfg, dir := runEnv(t, waitForTerm)
	require.NoError(t, os.MkdirAll(cfg.StateDir, 0o755))
	require.NoError(t, AppendXID(cfg.StateDir, XIDRecord{Time: time.Now(), GPU: 0, XID: 79})) // from before this start
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	lib := &fakeLib{devs: h100s(8), events: make(chan XIDEvent, 1)}
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		code, err := Run(context.Background(), cfg, lib)
		res <- result{code, err}
	}()
	waitFile(t, filepath.Join(dir, "ready"), "ready")
	if recs, _ := ReadXIDs(cfg.StateDir); len(recs) != 0 {
		t.Errorf("XIDs from before the start kept: %+v", recs)
	}
	lib.events <- XIDEvent{UUID: "GPU-00000005", XID: 79}
	waitFile(t, filepath.Join(cfg.StateDir, "xid"), "gpu=5 uuid=GPU-00000005 xid=79")

	sigs <- syscall.SIGTERM
	select {
	case r := <-res:
		if r.err != nil || r.code != 7 {
			t.Errorf("Run = %d, %v; want 7 (the script's TERM trap)", r.code, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM not forwarded")
	}
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if !lib.freed || lib.shutdowns != 1 {
		t.Errorf("after run: event set freed %v, shutdowns %d", lib.freed, lib.shutdowns)
	}
}

func TestRunStopsSlurmdWhenContextEnds(t *testing.T) {
	cfg, dir := runEnv(t, waitForTerm)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan int, 1)
	go func() {
		code, _ := Run(ctx, cfg, &fakeLib{devs: h100s(8)})
		res <- code
	}()
	waitFile(t, filepath.Join(dir, "ready"), "ready")
	cancel()
	select {
	case code := <-res:
		if code != 7 {
			t.Errorf("exit code %d, want 7", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("slurmd not stopped")
	}
}

func TestRunExitCodeOfSignal(t *testing.T) {
	cfg, _ := runEnv(t, `kill -KILL $$`)
	code, err := Run(context.Background(), cfg, &fakeLib{devs: h100s(8)})
	if err != nil || code != 128+9 {
		t.Errorf("Run = %d, %v; want 137", code, err)
	}
}

func TestRunSlurmdMissing(t *testing.T) {
	cfg, _ := runEnv(t, "exit 0")
	cfg.Slurmd = filepath.Join(t.TempDir(), "no-slurmd")
	if _, err := Run(context.Background(), cfg, &fakeLib{devs: h100s(8)}); err == nil || !strings.Contains(err.Error(), "start") {
		t.Errorf("err = %v", err)
	}
}

func TestDetect(t *testing.T) {
	var out bytes.Buffer
	err := Detect(context.Background(), NodeConfig{CPUs: 8, RealMemoryMB: 1000}, &fakeLib{devs: h100s(8)}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Gres=gpu:nvidia_h100_80gb_hbm3:8\n",
		"Conf=CPUs=8 RealMemory=1000 Gres=gpu:nvidia_h100_80gb_hbm3:8\n",
		"AutoDetect=off\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0-7]\n",
		"GPU-00000007",
		"81559 MiB",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("detect output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(out.String(), "Gres=gpu:nvidia_h100_80gb_hbm3:8\n") {
		t.Errorf("first line is not the Gres line:\n%s", out.String())
	}

	err = Detect(context.Background(), NodeConfig{CPUs: 8, RealMemoryMB: 1000}, &fakeLib{initErr: ErrNVMLMissing}, io.Discard)
	if !errors.Is(err, ErrNVMLMissing) {
		t.Errorf("without NVML: %v", err)
	}
	err = Detect(context.Background(), NodeConfig{CPUs: 8, RealMemoryMB: 1000, ExpectedGPUs: 8}, &fakeLib{devs: h100s(4)}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "found 4 GPUs, expected 8") {
		t.Errorf("count mismatch: %v", err)
	}
}

func TestMemTotalMB(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	require.NoError(t, os.WriteFile(p, []byte("MemTotal:       2113253376 kB\nMemFree:  1 kB\n"), 0o644))
	if mb, err := memTotalMB(p); err != nil || mb != 2063724 {
		t.Errorf("memTotalMB = %d, %v", mb, err)
	}
	require.NoError(t, os.WriteFile(p, []byte("MemFree:  1 kB\n"), 0o644))
	if _, err := memTotalMB(p); err == nil {
		t.Error("no MemTotal accepted")
	}
	if mb, err := memTotalMB("/proc/meminfo"); err != nil || mb <= 0 {
		t.Errorf("this machine: %d, %v", mb, err)
	}
}
