// Command onepool-node-agent is the slurmd pod's entrypoint: it registers
// the node in Slurm as a dynamic node with the GRES it finds (run), shows
// what it would register (detect), and is Slurm's HealthCheckProgram
// (health). See nodeset/agent/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/keys"
)

const usage = `usage: onepool-node-agent <command> [flags]

commands:
  run      find GPUs, write gres.conf, run slurmd -Z as a dynamic node (the container entrypoint)
           (arguments after -- go to slurmd)
  dra      the node's DRA driver alone, in a container apart from slurmd (its jobs then see no
           Kubernetes credential); run --dra serves it beside slurmd instead
  detect   print what run would register, without starting slurmd
  health   Slurm HealthCheckProgram: check the GPUs, drain the node when one is unhealthy
  release-wait
           slurmd Epilog: hold a onepool placeholder's node until onepool says its pods are gone

'onepool-node-agent <command> -h' lists a command's flags; each also reads the env var named there.
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	logger := log.New(stderr, "onepool-node-agent: ", 0)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var code int
	var err error
	switch args[0] {
	case "run":
		code, err = cmdRun(args[1:], logger, stderr)
	case "dra":
		code, err = cmdDRA(args[1:], logger, stderr)
	case "detect":
		code, err = cmdDetect(args[1:], stdout, stderr)
	case "health":
		code, err = cmdHealth(args[1:], logger, stdout, stderr)
	case "release-wait":
		code, err = cmdReleaseWait(args[1:], logger, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		logger.Printf("error: %v", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// envFlags defines flags whose defaults come from environment variables, so
// a flag given on the command line wins over the env var, which wins over
// the built-in default. Parse errors of env values are collected and
// reported after flag parsing.
type envFlags struct {
	fs   *flag.FlagSet
	errs map[string]error // by flag name
}

func newFlags(name string, out io.Writer) *envFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &envFlags{fs: fs, errs: map[string]error{}}
}

func (e *envFlags) help(env, usage string) string {
	if env == "" {
		return usage
	}
	return usage + " (env " + env + ")"
}

func (e *envFlags) String(p *string, name, env, def, usage string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		def = v
	}
	e.fs.StringVar(p, name, def, e.help(env, usage))
}

func (e *envFlags) Int(p *int, name, env string, def int, usage string) {
	if v, ok := os.LookupEnv(env); ok && env != "" && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			e.errs[name] = fmt.Errorf("%s=%q: %w", env, v, err)
		} else {
			def = n
		}
	}
	e.fs.IntVar(p, name, def, e.help(env, usage))
}

func (e *envFlags) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := os.LookupEnv(env); ok && env != "" && strings.TrimSpace(v) != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			e.errs[name] = fmt.Errorf("%s=%q: %w", env, v, err)
		} else {
			def = b
		}
	}
	e.fs.BoolVar(p, name, def, e.help(env, usage))
}

func (e *envFlags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(env); ok && env != "" && strings.TrimSpace(v) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			e.errs[name] = fmt.Errorf("%s=%q: %w", env, v, err)
		} else {
			def = d
		}
	}
	e.fs.DurationVar(p, name, def, e.help(env, usage))
}

func (e *envFlags) parse(args []string) error {
	if err := e.fs.Parse(args); err != nil {
		return err
	}
	// A bad env value matters only when no flag overrides it.
	e.fs.Visit(func(f *flag.Flag) { delete(e.errs, f.Name) })
	var errs []error
	e.fs.VisitAll(func(f *flag.Flag) {
		if err := e.errs[f.Name]; err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// nodeFlags are the flags run and detect share.
type nodeFlags struct {
	cpus, port, expected          int
	memMB                         int
	features, inventory, nodeAddr string
}

func addNodeFlags(f *envFlags, n *nodeFlags) {
	f.Int(&n.cpus, "cpus", agent.EnvCPUs, 0, "CPUs= to register (0: all this process may use)")
	f.Int(&n.memMB, "real-memory-mb", agent.EnvRealMemoryMB, 0, "RealMemory= in MB (0: MemTotal of /proc/meminfo)")
	f.String(&n.features, "features", keys.EnvSlurmFeatures, "", "comma-separated node features (letters, digits, _ . -)")
	f.Int(&n.port, "slurmd-port", agent.EnvSlurmdPort, 0, "Port= for this slurmd (0: slurm.conf's SlurmdPort)")
	f.Int(&n.expected, "expected-gpus", agent.EnvExpectedGPUs, 0, "refuse to start unless exactly this many GPUs are found (0: any)")
	f.String(&n.inventory, "gpu-inventory", agent.EnvGPUInventory, "", "JSON GPU inventory to use instead of NVML (labs without GPUs)")
	f.String(&n.nodeAddr, "node-addr", agent.EnvNodeAddr, "", "NodeAddr= to register (a pod's IP, from the downward API); empty: the node's name")
}

func (n nodeFlags) config() (agent.NodeConfig, error) {
	features, err := agent.ParseFeatures(n.features)
	if err != nil {
		return agent.NodeConfig{}, err
	}
	return agent.NodeConfig{CPUs: n.cpus, RealMemoryMB: int64(n.memMB), Features: features, SlurmdPort: n.port, ExpectedGPUs: n.expected, NodeAddr: n.nodeAddr}, nil
}

func cmdRun(args []string, logger *log.Logger, stderr io.Writer) (int, error) {
	f := newFlags("run", stderr)
	var nf nodeFlags
	var cfg agent.RunConfig
	addNodeFlags(f, &nf)
	f.String(&cfg.NodeName, "node-name", keys.EnvSlurmNodeName, "", "Slurm node name (required)")
	f.String(&cfg.Slurmd, "slurmd", agent.EnvSlurmd, agent.DefaultSlurmd, "slurmd binary")
	f.String(&cfg.SlurmConfDir, "slurm-conf-dir", agent.EnvSlurmConfDir, agent.DefaultSlurmConfDir, "the cluster's Slurm config dir (slurm.conf)")
	f.String(&cfg.ConfDir, "conf-dir", agent.EnvConfDir, "", "where gres.conf is written; when not the slurm conf dir, it gets links to that dir's other files (default: --slurm-conf-dir)")
	f.String(&cfg.StateDir, "state-dir", agent.EnvStateDir, agent.DefaultStateDir, "where XIDs are recorded for the health check")
	var df draFlags
	addDRAFlags(f, &df)
	if err := f.parse(args); err != nil {
		return 2, err
	}
	nc, err := nf.config()
	if err != nil {
		return 2, err
	}
	cfg.NodeConfig = nc
	cfg.SlurmdArgs = f.fs.Args()
	cfg.Log = logger
	cfg.ReapAll = os.Getpid() == 1
	if df.enabled {
		serve, err := df.serve(cfg.NodeName, logger)
		if err != nil {
			return 2, err
		}
		cfg.Serve = serve
	}

	// Signals go to slurmd, not to a context: slurmd decides how to stop,
	// and the agent exits when it has.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	return agent.Run(context.Background(), cfg, agent.NewLibrary(nf.inventory))
}

func cmdDetect(args []string, stdout, stderr io.Writer) (int, error) {
	f := newFlags("detect", stderr)
	var nf nodeFlags
	addNodeFlags(f, &nf)
	if err := f.parse(args); err != nil {
		return 2, err
	}
	cfg, err := nf.config()
	if err != nil {
		return 2, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Detect(ctx, cfg, agent.NewLibrary(nf.inventory), stdout); err != nil {
		return 1, err
	}
	return 0, nil
}

func cmdHealth(args []string, logger *log.Logger, stdout, stderr io.Writer) (int, error) {
	f := newFlags("health", stderr)
	var cfg agent.HealthConfig
	var inventory, fatal string
	var maxTemp int
	f.String(&cfg.NodeName, "node-name", keys.EnvSlurmNodeName, "", "Slurm node name to drain (required unless -dry-run)")
	f.Int(&cfg.ExpectedGPUs, "expected-gpus", agent.EnvExpectedGPUs, 0, "GPUs the node must have (0: any)")
	f.String(&inventory, "gpu-inventory", agent.EnvGPUInventory, "", "JSON GPU inventory to use instead of NVML (labs without GPUs)")
	f.String(&cfg.StateDir, "state-dir", agent.EnvStateDir, agent.DefaultStateDir, "where run records XIDs")
	f.String(&fatal, "fatal-xids", agent.EnvFatalXIDs, joinUints(agent.DefaultFatalXIDs), "comma-separated XIDs that drain the node")
	f.Int(&maxTemp, "max-temp-c", agent.EnvMaxTempC, 0, "drain at this GPU temperature (0: the GPU's slowdown threshold only)")
	f.String(&cfg.Scontrol, "scontrol", agent.EnvScontrol, agent.DefaultScontrol, "scontrol binary")
	f.Duration(&cfg.Timeout, "timeout", agent.EnvHealthTimeout, 5*time.Second, "bound on all NVML calls together")
	f.fs.BoolVar(&cfg.DryRun, "dry-run", false, "print the verdict, do not drain")
	if err := f.parse(args); err != nil {
		return 2, err
	}
	xids, err := parseUints(fatal)
	if err != nil {
		return 2, fmt.Errorf("--fatal-xids: %w", err)
	}
	if maxTemp < 0 {
		return 2, errors.New("--max-temp-c must not be negative")
	}
	cfg.FatalXIDs = xids
	cfg.MaxTempC = uint32(maxTemp)
	cfg.Log = logger
	cfg.Out = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := agent.Health(ctx, cfg, agent.NewLibrary(inventory))
	if err != nil && code == 0 {
		code = 2
	}
	return code, err
}

func parseUints(list string) ([]uint64, error) {
	out := []uint64{} // empty, not nil: an empty list means no XID drains
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func joinUints(ns []uint64) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(s, ",")
}
