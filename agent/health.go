package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/onepool/onepool/drain"
)

// DefaultFatalXIDs are the XIDs that mean the GPU (not the job) is broken:
// 48 double-bit ECC, 62/63/64 internal/row-remap/ECC page retirement
// events, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate,
// 94/95 contained/uncontained ECC. 13, 31 and 43 are application faults and
// are not listed.
var DefaultFatalXIDs = []uint64{48, 62, 63, 64, 74, 79, 92, 94, 95}

// HealthConfig configures the health subcommand.
type HealthConfig struct {
	NodeName     string
	ExpectedGPUs int      // 0: any count is fine
	StateDir     string   // where run records XIDs
	FatalXIDs    []uint64 // nil: DefaultFatalXIDs
	MaxTempC     uint32   // 0: only the GPU's own slowdown threshold
	Scontrol     string
	DryRun       bool
	Timeout      time.Duration // bound on all NVML calls together; 0: 5s
	Log          *log.Logger
	Out          io.Writer // the verdict line
}

// Check names, in the order a failure's reason is chosen: the first failure
// of the most serious kind becomes the drain reason.
const (
	checkNVML         = "nvml"
	checkCount        = "count"
	checkXID          = "xid"
	checkECC          = "ecc"
	checkRetiredPages = "retired pages"
	checkRowRemap     = "row remap"
	checkTemperature  = "temperature"
)

// healthChecks are all checks, in that order.
var healthChecks = []string{checkNVML, checkCount, checkXID, checkECC, checkRetiredPages, checkRowRemap, checkTemperature}

// Failure is one failed check.
type Failure struct {
	Check  string
	Detail string
}

// Reason is the Slurm drain reason: drain.HealthReason, "onepool: gpu
// <check>: <detail>".
func (f Failure) Reason() string { return drain.HealthReason(f.Check, f.Detail) }

// Verdict is the outcome of all checks.
type Verdict struct {
	GPUs     int
	Failures []Failure // most serious first
	Notes    []string  // things worth a log line that are not failures
	// Skipped lists, per query, the GPUs that do not support it
	// (NVML NOT_SUPPORTED: ECC off, no page retirement on Hopper, ...).
	Skipped map[string][]int
}

// skippedNotes is Skipped as one line per query.
func (v Verdict) skippedNotes() []string {
	var out []string
	for what, gpus := range v.Skipped {
		s := make([]string, len(gpus))
		for i, g := range gpus {
			s[i] = fmt.Sprint(g)
		}
		out = append(out, fmt.Sprintf("%s not supported on GPU %s: skipped", what, strings.Join(s, ",")))
	}
	sort.Strings(out)
	return out
}

// Healthy says whether no check failed.
func (v Verdict) Healthy() bool { return len(v.Failures) == 0 }

// Reason is the drain reason, empty when healthy.
func (v Verdict) Reason() string {
	if v.Healthy() {
		return ""
	}
	return v.Failures[0].Reason()
}

func (v *Verdict) fail(check, format string, args ...any) {
	v.Failures = append(v.Failures, Failure{Check: check, Detail: fmt.Sprintf(format, args...)})
}

// errSkippedAfterHang: the call was not made because an earlier one hung;
// that one is the failure reported.
var errSkippedAfterHang = errors.New("skipped after a hung NVML call")

// bounded runs one library call, giving up when ctx ends. NVML calls cannot
// be interrupted: a call that hangs is left behind, and the process exits
// soon after anyway.
func bounded(ctx context.Context, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s: no answer: %w", what, ctx.Err())
	}
}

// CheckHealth runs every check against lib and the XID state file.
func CheckHealth(ctx context.Context, lib Library, cfg HealthConfig) (v Verdict) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fatal := cfg.FatalXIDs
	if fatal == nil {
		fatal = DefaultFatalXIDs
	}

	hung := false
	call := func(what string, f func() error) error {
		if hung {
			// One call is stuck inside NVML: further calls would queue
			// behind it (or race it), so fail them without calling.
			return fmt.Errorf("%s: %w", what, errSkippedAfterHang)
		}
		err := bounded(ctx, what, f)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			hung = true
		}
		return err
	}

	if err := call("nvmlInit", lib.Init); err != nil {
		if errors.Is(err, ErrNVMLMissing) && cfg.ExpectedGPUs == 0 {
			// A CPU node in a cluster-wide HealthCheckProgram: nothing to check.
			v.Notes = append(v.Notes, "no NVML and no GPUs expected: nothing to check")
			return v
		}
		v.fail(checkNVML, "%s", shortNVMLError(err))
		return v
	}
	defer func() {
		if !hung { // Shutdown while a call is stuck inside NVML could hang too
			if err := lib.Shutdown(); err != nil {
				v.Notes = append(v.Notes, err.Error())
			}
		}
	}()

	var n int
	if err := call("nvmlDeviceGetCount", func() (err error) { n, err = lib.DeviceCount(); return }); err != nil {
		v.fail(checkNVML, "%s", shortNVMLError(err))
		return v
	}
	v.GPUs = n
	if cfg.ExpectedGPUs > 0 && n != cfg.ExpectedGPUs {
		v.fail(checkCount, "found %d of %d", n, cfg.ExpectedGPUs)
	}

	// XIDs the run command recorded, by GPU index.
	recorded := map[int][]uint64{}
	recs, err := ReadXIDs(cfg.StateDir)
	if err != nil {
		v.Notes = append(v.Notes, err.Error())
	}
	for _, r := range recs {
		recorded[r.GPU] = append(recorded[r.GPU], r.XID)
	}
	isFatal := func(x uint64) bool {
		for _, f := range fatal {
			if f == x {
				return true
			}
		}
		return false
	}

	for i := 0; i < n && !hung; i++ {
		checkDevice(ctx, lib, i, cfg, &v, call, recorded, isFatal)
		delete(recorded, i)
	}
	// XIDs NVML could not tie to a GPU (gpu=-1) or of GPUs now missing.
	for idx, xids := range recorded {
		for _, x := range xids {
			if isFatal(x) {
				v.fail(checkXID, "%d on GPU %s", x, gpuLabel(idx))
			}
		}
	}

	sort.SliceStable(v.Failures, func(i, j int) bool {
		return slices.Index(healthChecks, v.Failures[i].Check) < slices.Index(healthChecks, v.Failures[j].Check)
	})
	return v
}

func gpuLabel(idx int) string {
	if idx < 0 {
		return "?"
	}
	return fmt.Sprint(idx)
}

// checkDevice runs the per-GPU checks of GPU i. A query the GPU does not
// support is skipped; any other NVML error fails the GPU (a GPU that fell
// off the bus answers GPU_IS_LOST to everything).
func checkDevice(ctx context.Context, lib Library, i int, cfg HealthConfig, v *Verdict,
	call func(string, func() error) error, recorded map[int][]uint64, isFatal func(uint64) bool) {
	var dev Device
	if err := call("nvmlDeviceGetHandleByIndex", func() (err error) { dev, err = lib.Device(i); return }); err != nil {
		v.fail(checkNVML, "GPU %d: %s", i, shortNVMLError(err))
		return
	}
	idx := i
	if err := call("nvmlDeviceGetIndex", func() (err error) { idx, err = dev.Index(); return }); err != nil {
		idx = i
	}
	// query runs one check's call: false when it was skipped or failed.
	query := func(what string, f func() error) bool {
		err := call(what, f)
		switch {
		case err == nil:
			return true
		case errors.Is(err, errSkippedAfterHang):
		case errors.Is(err, ErrNotSupported):
			if v.Skipped == nil {
				v.Skipped = map[string][]int{}
			}
			v.Skipped[what] = append(v.Skipped[what], idx)
		default:
			v.fail(checkNVML, "GPU %d: %s", idx, shortNVMLError(err))
		}
		return false
	}

	xids := recorded[idx]
	if r, ok := dev.(xidRecorder); ok {
		xids = append(append([]uint64(nil), xids...), r.RecordedXIDs()...)
	}
	for _, x := range xids {
		if isFatal(x) {
			v.fail(checkXID, "%d on GPU %d", x, idx)
		}
	}

	var ecc uint64
	if query("ecc", func() (err error) { ecc, err = dev.UncorrectableECC(); return }) && ecc > 0 {
		v.fail(checkECC, "%d uncorrectable on GPU %d", ecc, idx)
	}
	var pending bool
	if query("retired pages", func() (err error) { pending, err = dev.RetiredPagesPending(); return }) && pending {
		v.fail(checkRetiredPages, "pending on GPU %d", idx)
	}
	var remapPending, remapFailed bool
	if query("row remap", func() (err error) { remapPending, remapFailed, err = dev.RowRemap(); return }) {
		if remapFailed {
			v.fail(checkRowRemap, "failed on GPU %d", idx)
		} else if remapPending {
			// Jobs still run; the remap takes effect at the next GPU reset.
			v.Notes = append(v.Notes, fmt.Sprintf("GPU %d: row remap pending (applied at next GPU reset)", idx))
		}
	}

	var temp, slowdown uint32
	if query("temperature", func() (err error) { temp, err = dev.TemperatureC(); return }) {
		_ = query("slowdown temperature", func() (err error) { slowdown, err = dev.SlowdownTemperatureC(); return })
		limit, label := slowdown, "slowdown"
		if cfg.MaxTempC > 0 && (limit == 0 || cfg.MaxTempC < limit) {
			limit, label = cfg.MaxTempC, "limit"
		}
		if limit > 0 && temp >= limit {
			v.fail(checkTemperature, "%dC on GPU %d (%s %dC)", temp, idx, label, limit)
		}
	}
}

// shortNVMLError keeps an NVML error fit for a drain reason.
func shortNVMLError(err error) string {
	if errors.Is(err, ErrNVMLMissing) {
		return "libnvidia-ml.so.1 not found (no driver)"
	}
	return err.Error()
}

// Health runs the checks and drains the node when one fails. Exit code: 0
// healthy, 1 unhealthy (drained, or would be with DryRun), error when the
// drain itself failed.
func Health(ctx context.Context, cfg HealthConfig, lib Library) (int, error) {
	if !cfg.DryRun {
		if err := ValidateNodeName(cfg.NodeName); err != nil {
			return 0, err
		}
	}
	v := CheckHealth(ctx, lib, cfg)
	for _, n := range append(v.Notes, v.skippedNotes()...) {
		cfg.Log.Printf("note: %s", n)
	}
	if v.Healthy() {
		fmt.Fprintf(cfg.Out, "healthy: %d GPUs\n", v.GPUs)
		return 0, nil
	}
	for _, f := range v.Failures {
		cfg.Log.Printf("failed: %s", f.Reason())
	}
	reason := v.Reason()
	if cfg.DryRun {
		fmt.Fprintf(cfg.Out, "unhealthy: %s (dry run: not draining)\n", reason)
		return 1, nil
	}
	if err := scontrolDrain(ctx, cfg.Scontrol, cfg.NodeName, reason); err != nil {
		fmt.Fprintf(cfg.Out, "unhealthy: %s (drain failed)\n", reason)
		return 1, err
	}
	fmt.Fprintf(cfg.Out, "unhealthy: %s (drained %s)\n", reason, cfg.NodeName)
	return 1, nil
}

// drainTimeout bounds scontrol: with slurmctld down every call hangs.
const drainTimeout = 10 * time.Second

// scontrolDrain sets the node DRAIN with reason. Draining an already drained node is
// accepted by Slurm and only refreshes the reason, so no check first.
func scontrolDrain(ctx context.Context, scontrol, node, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, scontrol, "update", "nodename="+node, "state=drain", "reason="+reason)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("drain %s: scontrol gave no answer in %s: %w", node, drainTimeout, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("drain %s: %w: %s", node, err, strings.TrimSpace(string(out)))
	}
	return nil
}
