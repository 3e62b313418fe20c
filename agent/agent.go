// Package agent is the onepool node agent, the slurmd pod's entrypoint: it
// finds the node's GPUs (NVML, or an inventory file in a lab), writes the
// node's gres.conf and starts slurmd as a dynamic node (slurmd -Z) whose
// first registration already carries the right Gres=. It also records GPU XID
// errors while slurmd runs, and is Slurm's HealthCheckProgram (see README.md).
package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/onepool/onepool/keys"
)

// Environment variables the agent reads; a flag of the same meaning wins.
// keys.EnvSlurmNodeName and keys.EnvSlurmFeatures, set by the NodeSet
// controller, are read too.
const (
	EnvConfDir       = "ONEPOOL_CONF_DIR"
	EnvSlurmConfDir  = "ONEPOOL_SLURM_CONF_DIR"
	EnvCPUs          = keys.EnvSlurmCPUs
	EnvRealMemoryMB  = keys.EnvSlurmRealMemoryMB
	EnvSlurmdPort    = "ONEPOOL_SLURMD_PORT"
	EnvNodeAddr      = "ONEPOOL_NODE_ADDR"
	EnvSlurmd        = "ONEPOOL_SLURMD"
	EnvExpectedGPUs  = "ONEPOOL_EXPECTED_GPUS"
	EnvGPUInventory  = "ONEPOOL_GPU_INVENTORY"
	EnvStateDir      = "ONEPOOL_STATE_DIR"
	EnvScontrol      = "ONEPOOL_SCONTROL"
	EnvFatalXIDs     = "ONEPOOL_FATAL_XIDS"
	EnvMaxTempC      = "ONEPOOL_MAX_TEMP_C"
	EnvHealthTimeout = "ONEPOOL_HEALTH_TIMEOUT"
)

// Defaults.
const (
	DefaultSlurmConfDir = "/etc/slurm"
	DefaultStateDir     = "/run/onepool"
	DefaultSlurmd       = "slurmd"
	DefaultScontrol     = "scontrol"
)

// discoverTimeout bounds GPU discovery at start: a hung driver should fail
// the pod visibly, not leave it running without slurmd.
const discoverTimeout = time.Minute

// NodeConfig is what both run and detect need to know about the node.
type NodeConfig struct {
	CPUs         int   // 0: runtime.NumCPU()
	RealMemoryMB int64 // 0: MemTotal from /proc/meminfo
	Features     []string
	SlurmdPort   int // 0: no Port=
	ExpectedGPUs int // 0: any count
	// NodeAddr is where slurmctld reaches this slurmd (a pod's IP: a pod's
	// name does not resolve); "": slurmctld resolves the node's name.
	NodeAddr string
}

// RunConfig configures the run subcommand.
type RunConfig struct {
	NodeConfig
	NodeName     string
	Slurmd       string
	SlurmdArgs   []string // appended after the agent's own
	SlurmConfDir string
	ConfDir      string // "" or SlurmConfDir: write gres.conf into SlurmConfDir itself
	StateDir     string
	// Signals are forwarded to slurmd (SIGTERM, SIGINT, SIGHUP from main).
	Signals <-chan os.Signal
	// ReapAll: reap every child, as a container's PID 1 must.
	ReapAll bool
	Log     *log.Logger
	// Serve, when set, runs beside slurmd with the GPUs found (the DRA
	// driver) until ctx ends; the agent waits for it before exiting. Its
	// error is logged: slurmd keeps serving Slurm without it.
	Serve func(ctx context.Context, gpus []GPU) error
}

// nodeNameRE is a DNS name (RFC 1123 labels, dots allowed, as Kubernetes node
// names are); Slurm takes such names as they are, while brackets, commas and
// spaces would be read as host lists.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// ValidateNodeName checks a Slurm node name.
func ValidateNodeName(name string) error {
	if name == "" {
		return errors.New("node name is required (--node-name or ONEPOOL_SLURM_NODE_NAME)")
	}
	if len(name) > 253 || !nodeNameRE.MatchString(name) {
		return fmt.Errorf("node name %q: want a DNS name (letters, digits, '-', '.')", name)
	}
	return nil
}

var featureRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ParseFeatures splits and validates a comma list of Slurm node features.
// Only [A-Za-z0-9_.-]: Slurm reads '&', '|', '[', '*' and spaces as operators
// in --constraint, and '=' or spaces would break the --conf string.
func ParseFeatures(list string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !featureRE.MatchString(f) {
			return nil, fmt.Errorf("feature %q: only letters, digits, '_', '.', '-' allowed", f)
		}
		out = append(out, f)
	}
	return out, nil
}

func (c *NodeConfig) validate() error {
	if c.CPUs < 0 || c.RealMemoryMB < 0 || c.ExpectedGPUs < 0 {
		return errors.New("cpus, real memory and expected GPUs must not be negative")
	}
	if c.SlurmdPort < 0 || c.SlurmdPort > 65535 {
		return fmt.Errorf("slurmd port %d out of range", c.SlurmdPort)
	}
	for _, f := range c.Features {
		if !featureRE.MatchString(f) {
			return fmt.Errorf("feature %q: only letters, digits, '_', '.', '-' allowed", f)
		}
	}
	return nil
}

// nodeConf fills the defaults and builds the --conf string's parts.
func (c NodeConfig) nodeConf(gpus []GPU) (NodeConf, error) {
	nc := NodeConf{CPUs: c.CPUs, RealMemoryMB: c.RealMemoryMB, Gres: GresString(gpus), Features: c.Features, Port: c.SlurmdPort}
	if c.NodeAddr != "" {
		ip, err := netip.ParseAddr(c.NodeAddr)
		if err != nil {
			return nc, fmt.Errorf("node address %q: not an IP address", c.NodeAddr)
		}
		nc.NodeAddr = ip.String()
	}
	if nc.CPUs == 0 {
		nc.CPUs = runtime.NumCPU()
	}
	if nc.RealMemoryMB == 0 {
		mb, err := memTotalMB("/proc/meminfo")
		if err != nil {
			return nc, err
		}
		nc.RealMemoryMB = mb
	}
	return nc, nil
}

// memTotalMB reads MemTotal in MiB, Slurm's "MB".
func memTotalMB(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("real memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("real memory: %s: %w", path, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("real memory: no MemTotal in %s", path)
}

// discover initializes lib and lists its GPUs. On success lib stays
// initialized and devs are the handles (for the XID watch); the caller shuts
// lib down.
func discover(ctx context.Context, lib Library) (gpus []GPU, devs []Device, err error) {
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	if err := bounded(ctx, "nvmlInit", lib.Init); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			_ = lib.Shutdown() // the error above is the one to report
		}
	}()
	var n int
	if err := bounded(ctx, "nvmlDeviceGetCount", func() (err error) { n, err = lib.DeviceCount(); return }); err != nil {
		return nil, nil, err
	}
	for i := 0; i < n; i++ {
		var g GPU
		var d Device
		err := bounded(ctx, fmt.Sprintf("GPU %d", i), func() error {
			var err error
			if d, err = lib.Device(i); err != nil {
				return err
			}
			g, err = describe(d, i)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		units, err := withMIG(ctx, d, g)
		if err != nil {
			return nil, nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		gpus = append(gpus, units...)
		devs = append(devs, d)
	}
	return gpus, devs, nil
}

// withMIG is the GPU's GRES units: itself, or its MIG devices.
func withMIG(ctx context.Context, d Device, g GPU) ([]GPU, error) {
	var migs []MIGDevice
	err := bounded(ctx, "MIG devices", func() (err error) { migs, err = d.MIGDevices(); return })
	if errors.Is(err, ErrNotSupported) {
		migs, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return migUnits(g, migs)
}

// describe reads what the agent registers about one GPU.
func describe(d Device, i int) (GPU, error) {
	g := GPU{Index: i}
	var err error
	if idx, err := d.Index(); err == nil {
		g.Index = idx
	}
	if g.Name, err = d.Name(); err != nil {
		return g, err
	}
	if g.Name == "" {
		return g, errors.New("empty device name")
	}
	if g.UUID, err = d.UUID(); err != nil {
		return g, err
	}
	if g.Minor, err = d.Minor(); err != nil {
		return g, err
	}
	if g.MemoryMiB, err = d.MemoryMiB(); err != nil && !errors.Is(err, ErrNotSupported) {
		return g, err
	}
	g.Device = DefaultDevice(g.Minor)
	if p, ok := d.(devicePather); ok {
		g.Device = p.DevicePath()
	}
	return g, nil
}

// CheckGPUCount refuses a count of GPUs found other than expected (0:
// any; a partitioned GPU counts once): a node that lost a GPU must not register or publish the rest as
// if they were all.
func CheckGPUCount(gpus []GPU, expected int) error {
	if n := PhysicalGPUs(gpus); expected > 0 && n != expected {
		return fmt.Errorf("found %d GPUs, expected %d (--expected-gpus): not starting slurmd with the wrong GRES", n, expected)
	}
	return nil
}

// Run is the run subcommand: it returns slurmd's exit code, or an error when
// slurmd could not be started.
func Run(ctx context.Context, cfg RunConfig, lib Library) (int, error) {
	logger := cfg.Log
	if err := ValidateNodeName(cfg.NodeName); err != nil {
		return 0, err
	}
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	if cfg.SlurmConfDir == "" {
		cfg.SlurmConfDir = DefaultSlurmConfDir
	}
	if cfg.ConfDir == "" {
		cfg.ConfDir = cfg.SlurmConfDir
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Slurmd == "" {
		cfg.Slurmd = DefaultSlurmd
	}

	gpus, devs, err := discover(ctx, lib)
	if err != nil {
		return 0, fmt.Errorf("GPU discovery: %w", err)
	}
	// watchCtx ends before NVML is shut down, and the watcher is waited
	// for: no NVML call may run after Shutdown (it would crash).
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWatch()
		wg.Wait()
		if err := lib.Shutdown(); err != nil {
			logger.Printf("%v", err)
		}
	}()

	if err := CheckGPUCount(gpus, cfg.ExpectedGPUs); err != nil {
		return 0, err
	}
	if len(gpus) == 0 {
		logger.Printf("WARNING: NO GPUs FOUND: %s registers as a CPU node without Gres=", cfg.NodeName)
	}
	nc, err := cfg.nodeConf(gpus)
	if err != nil {
		return 0, err
	}

	if err := ResetXIDState(cfg.StateDir); err != nil {
		return 0, err
	}
	if filepath.Clean(cfg.ConfDir) != filepath.Clean(cfg.SlurmConfDir) {
		if err := prepareConfDir(cfg.SlurmConfDir, cfg.ConfDir); err != nil {
			return 0, err
		}
	}
	gresConf := GresConf(gpus)
	gresPath := filepath.Join(cfg.ConfDir, gresConfName)
	if err := WriteFileAtomic(gresPath, []byte(gresConf), 0o644); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(gresConf), "\n") {
		if !strings.HasPrefix(line, "#") {
			logger.Printf("%s: %s", gresPath, line)
		}
	}
	conf := nc.String()
	logger.Printf("registering %s as a dynamic node: Gres=%s", cfg.NodeName, nc.Gres)
	logger.Printf("--conf %q", conf)

	if cfg.Serve != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cfg.Serve(watchCtx, gpus); err != nil {
				logger.Printf("ERROR: %v", err)
			}
		}()
	}
	if len(devs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchXIDs(watchCtx, lib, devs, gpus, cfg.StateDir, logger)
		}()
	}

	argv := append([]string{cfg.Slurmd, "-D", "-Z", "-N", cfg.NodeName, "--conf", conf}, cfg.SlurmdArgs...)
	// SLURM_CONF always names the conf dir's slurm.conf: slurmd reads
	// gres.conf from next to it, and this pins it to the one just written.
	env := append(withoutEnv(os.Environ(), "SLURM_CONF"), "SLURM_CONF="+filepath.Join(cfg.ConfDir, "slurm.conf"))
	return supervise(ctx, argv, env, cfg.Signals, cfg.ReapAll, logger)
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Discover lists the node's GPUs exactly as run and detect find them
// (bounded NVML calls, the inventory's device files), and shuts lib down.
func Discover(ctx context.Context, lib Library) ([]GPU, error) {
	gpus, _, err := discover(ctx, lib)
	if err != nil {
		return nil, fmt.Errorf("GPU discovery: %w", err)
	}
	_ = lib.Shutdown() // the GPUs are found: a failed shutdown changes nothing
	return gpus, nil
}

// Detect is the detect subcommand: it prints what run would register.
func Detect(ctx context.Context, cfg NodeConfig, lib Library, out io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	gpus, err := Discover(ctx, lib)
	if err != nil {
		return err
	}
	nc, err := cfg.nodeConf(gpus)
	if err != nil {
		return err
	}
	if nc.Gres == "" {
		fmt.Fprintln(out, "Gres=(none: no GPUs found, this node would register as a CPU node)")
	} else {
		fmt.Fprintf(out, "Gres=%s\n", nc.Gres)
	}
	fmt.Fprintf(out, "Conf=%s\n\n", nc.String())
	fmt.Fprintln(out, "# gres.conf")
	fmt.Fprint(out, GresConf(gpus))
	fmt.Fprintf(out, "\n# %d devices\n", len(gpus))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tTYPE\tUUID\tMINOR\tMEMORY\tDEVICE\tMIG")
	for _, g := range gpus {
		mig := "-"
		if g.MIG != nil {
			mig = fmt.Sprintf("gi=%d ci=%d %s", g.MIG.GI, g.MIG.CI, strings.Join(g.MIG.Caps, ","))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d MiB\t%s\t%s\n", g.Index, g.Name, g.Type(), g.UUID, g.Minor, g.MemoryMiB, g.Device, mig)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return CheckGPUCount(gpus, cfg.ExpectedGPUs)
}
