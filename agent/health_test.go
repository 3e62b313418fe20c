package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/drain"
)

var errNotSupportedQuery = fmt.Errorf("nvml query: %w", ErrNotSupported)

func TestCheckHealth(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lib      func() *fakeLib
		cfg      HealthConfig
		xids     []XIDRecord // in the state file
		want     string      // drain reason; "" healthy
		failures int
	}{
		{name: "healthy", lib: func() *fakeLib { return &fakeLib{devs: h100s(8)} }, cfg: HealthConfig{ExpectedGPUs: 8}},
		{name: "count", lib: func() *fakeLib { return &fakeLib{devs: h100s(7)} }, cfg: HealthConfig{ExpectedGPUs: 8},
			want: "onepool: gpu count: found 7 of 8", failures: 1},
		{name: "count not checked when not expected", lib: func() *fakeLib { return &fakeLib{devs: h100s(7)} }},
		{name: "nvml init error", lib: func() *fakeLib {
			return &fakeLib{initErr: errors.New("nvmlInit: Driver/library version mismatch")}
		}, cfg: HealthConfig{ExpectedGPUs: 8}, want: "onepool: gpu nvml: nvmlInit: Driver/library version mismatch", failures: 1},
		{name: "nvml missing on a GPU node", lib: func() *fakeLib { return &fakeLib{initErr: ErrNVMLMissing} },
			cfg: HealthConfig{ExpectedGPUs: 8}, want: "onepool: gpu nvml: libnvidia-ml.so.1 not found (no driver)", failures: 1},
		{name: "nvml missing on a CPU node", lib: func() *fakeLib { return &fakeLib{initErr: ErrNVMLMissing} }},
		{name: "nvml count error", lib: func() *fakeLib {
			return &fakeLib{devs: h100s(8), countErr: errors.New("nvmlDeviceGetCount: Unknown Error")}
		},
			want: "onepool: gpu nvml: nvmlDeviceGetCount: Unknown Error", failures: 1},
		{name: "fatal xid", lib: func() *fakeLib { return &fakeLib{devs: h100s(8)} },
			xids: []XIDRecord{{GPU: 3, UUID: "GPU-00000003", XID: 79}}, want: "onepool: gpu xid: 79 on GPU 3", failures: 1},
		{name: "application xids ignored", lib: func() *fakeLib { return &fakeLib{devs: h100s(8)} },
			xids: []XIDRecord{{GPU: 1, XID: 13}, {GPU: 2, XID: 31}, {GPU: 3, XID: 43}}},
		{name: "custom fatal list", lib: func() *fakeLib { return &fakeLib{devs: h100s(8)} }, cfg: HealthConfig{FatalXIDs: []uint64{13}},
			xids: []XIDRecord{{GPU: 1, XID: 13}, {GPU: 2, XID: 79}}, want: "onepool: gpu xid: 13 on GPU 1", failures: 1},
		{name: "xid of an unknown GPU", lib: func() *fakeLib { return &fakeLib{devs: h100s(8)} },
			xids: []XIDRecord{{GPU: -1, XID: 48}}, want: "onepool: gpu xid: 48 on GPU ?", failures: 1},
		{name: "ecc", lib: func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[1].ecc = 2; return l },
			want: "onepool: gpu ecc: 2 uncorrectable on GPU 1", failures: 1},
		{name: "retired pages", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(8)}
			l.devs[0].retired, l.devs[0].retiredErr = true, nil
			return l
		}, want: "onepool: gpu retired pages: pending on GPU 0", failures: 1},
		{name: "row remap failure", lib: func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[2].remapFail = true; return l },
			want: "onepool: gpu row remap: failed on GPU 2", failures: 1},
		{name: "row remap pending is only a note", lib: func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[2].remapPend = true; return l }},
		{name: "temperature at slowdown", lib: func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[5].temp = 92; return l },
			want: "onepool: gpu temperature: 92C on GPU 5 (slowdown 90C)", failures: 1},
		{name: "temperature over --max-temp-c", lib: func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[4].temp = 86; return l },
			cfg: HealthConfig{MaxTempC: 85}, want: "onepool: gpu temperature: 86C on GPU 4 (limit 85C)", failures: 1},
		{name: "max temp without slowdown threshold", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(2)}
			l.devs[1].temp, l.devs[1].slowdown, l.devs[1].slowdownErr = 99, 0, errNotSupportedQuery
			return l
		}, cfg: HealthConfig{MaxTempC: 95}, want: "onepool: gpu temperature: 99C on GPU 1 (limit 95C)", failures: 1},
		{name: "not supported is skipped", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(8)}
			for _, d := range l.devs {
				d.eccErr, d.retiredErr, d.remapErr, d.tempErr, d.slowdownErr = errNotSupportedQuery, errNotSupportedQuery, errNotSupportedQuery, errNotSupportedQuery, errNotSupportedQuery
				d.ecc, d.retired, d.remapFail, d.temp = 9, true, true, 120 // values behind NOT_SUPPORTED are never read
			}
			return l
		}, cfg: HealthConfig{ExpectedGPUs: 8, MaxTempC: 80}},
		{name: "lost GPU", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(8)}
			l.devs[4].eccErr = errors.New("nvmlDeviceGetTotalEccErrors: GPU is lost")
			return l
		}, want: "onepool: gpu nvml: GPU 4: nvmlDeviceGetTotalEccErrors: GPU is lost", failures: 1},
		{name: "no handle", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(8)}
			l.devs[6].handleErr = errors.New("nvmlDeviceGetHandleByIndex(6): Unknown Error")
			return l
		}, want: "onepool: gpu nvml: GPU 6: nvmlDeviceGetHandleByIndex(6): Unknown Error", failures: 1},
		{name: "most serious failure is the reason", lib: func() *fakeLib {
			l := &fakeLib{devs: h100s(8)}
			l.devs[0].temp = 95
			l.devs[1].ecc = 1
			return l
		}, xids: []XIDRecord{{GPU: 7, XID: 94}}, want: "onepool: gpu xid: 94 on GPU 7", failures: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, r := range tc.xids {
				r.Time = time.Now()
				if err := AppendXID(dir, r); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tc.cfg
			cfg.StateDir = dir
			lib := tc.lib()
			v := CheckHealth(context.Background(), lib, cfg)
			if got := v.Reason(); got != tc.want {
				t.Errorf("reason = %q, want %q (failures %+v)", got, tc.want, v.Failures)
			}
			if len(v.Failures) != tc.failures {
				t.Errorf("failures = %+v, want %d", v.Failures, tc.failures)
			}
			if v.Healthy() != (tc.want == "") {
				t.Errorf("Healthy() = %v", v.Healthy())
			}
			if tc.want != "" && !strings.HasPrefix(v.Reason(), drain.ReasonGPUPrefix) {
				t.Errorf("reason %q lacks %q", v.Reason(), drain.ReasonGPUPrefix)
			}
			if lib.initErr == nil && lib.shutdowns != 1 {
				t.Errorf("Shutdown called %d times, want 1", lib.shutdowns)
			}
		})
	}
}

func TestCheckHealthHungCall(t *testing.T) {
	l := &fakeLib{devs: h100s(8)}
	l.devs[3].hang = make(chan struct{})
	defer close(l.devs[3].hang)
	start := time.Now()
	v := CheckHealth(context.Background(), l, HealthConfig{StateDir: t.TempDir(), Timeout: 100 * time.Millisecond})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v with a 100ms timeout", d)
	}
	want := "onepool: gpu nvml: GPU 3: temperature: no answer: context deadline exceeded"
	if v.Reason() != want || len(v.Failures) != 1 {
		t.Errorf("reason %q (%d failures), want %q", v.Reason(), len(v.Failures), want)
	}
	if l.shutdowns != 0 {
		t.Error("Shutdown called while a call hangs in NVML")
	}
}

// fakeScontrol writes a script that records its argv, one per line, and
// exits with code.
func fakeScontrol(t *testing.T, code int) (path, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	path = filepath.Join(dir, "scontrol")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\n' \"$a\"; done > %s\necho 'slurm_update error: Invalid node name specified' >&2\nexit %d\n", argsFile, code)
	if code == 0 {
		script = fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\n' \"$a\"; done > %s\n", argsFile)
	}
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, argsFile
}

func TestHealthDrains(t *testing.T) {
	sick := func() *fakeLib { l := &fakeLib{devs: h100s(8)}; l.devs[1].ecc = 2; return l }
	for _, tc := range []struct {
		name      string
		lib       *fakeLib
		dryRun    bool
		scontrolC int
		wantCode  int
		wantErr   bool
		wantArgs  string // "" : scontrol not run
		wantOut   string
	}{
		{name: "healthy", lib: &fakeLib{devs: h100s(8)}, wantOut: "healthy: 8 GPUs\n"},
		{name: "unhealthy drains", lib: sick(), wantCode: 1,
			wantArgs: "update\nnodename=gpu-0\nstate=drain\nreason=onepool: gpu ecc: 2 uncorrectable on GPU 1\n",
			wantOut:  "unhealthy: onepool: gpu ecc: 2 uncorrectable on GPU 1 (drained gpu-0)\n"},
		{name: "dry run", lib: sick(), dryRun: true, wantCode: 1,
			wantOut: "unhealthy: onepool: gpu ecc: 2 uncorrectable on GPU 1 (dry run: not draining)\n"},
		{name: "scontrol fails", lib: sick(), scontrolC: 1, wantCode: 1, wantErr: true,
			wantArgs: "update\nnodename=gpu-0\nstate=drain\nreason=onepool: gpu ecc: 2 uncorrectable on GPU 1\n",
			wantOut:  "unhealthy: onepool: gpu ecc: 2 uncorrectable on GPU 1 (drain failed)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scontrol, argsFile := fakeScontrol(t, tc.scontrolC)
			var out, logs bytes.Buffer
			code, err := Health(context.Background(), HealthConfig{
				NodeName: "gpu-0", StateDir: t.TempDir(), Scontrol: scontrol, DryRun: tc.dryRun,
				Log: log.New(&logs, "", 0), Out: &out,
			}, tc.lib)
			if code != tc.wantCode || (err != nil) != tc.wantErr {
				t.Errorf("Health = %d, %v; want %d, err %v", code, err, tc.wantCode, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(err.Error(), "Invalid node name") {
				t.Errorf("error %q lacks scontrol's message", err)
			}
			if out.String() != tc.wantOut {
				t.Errorf("out = %q, want %q", out.String(), tc.wantOut)
			}
			args, _ := os.ReadFile(argsFile)
			if string(args) != tc.wantArgs {
				t.Errorf("scontrol args = %q, want %q", args, tc.wantArgs)
			}
		})
	}
}

func TestHealthNeedsNodeName(t *testing.T) {
	_, err := Health(context.Background(), HealthConfig{StateDir: t.TempDir(), Log: log.New(os.Stderr, "", 0), Out: os.Stdout}, &fakeLib{})
	if err == nil || !strings.Contains(err.Error(), "node name is required") {
		t.Errorf("err = %v", err)
	}
}

func TestNotSupportedIsReported(t *testing.T) {
	l := &fakeLib{devs: h100s(3)} // retired pages: not supported on all, as on Hopper
	l.devs[1].eccErr = errNotSupportedQuery
	v := CheckHealth(context.Background(), l, HealthConfig{StateDir: t.TempDir()})
	if !v.Healthy() {
		t.Fatalf("unhealthy: %+v", v.Failures)
	}
	want := []string{
		"ecc not supported on GPU 1: skipped",
		"retired pages not supported on GPU 0,1,2: skipped",
	}
	if got := v.skippedNotes(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("skipped notes = %q, want %q", got, want)
	}
}
