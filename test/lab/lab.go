// Package lab runs the real thing on one machine: Slurm 24.11 (slurmctld,
// several slurmd, slurmrestd) in a Debian trixie chroot, and a Kubernetes
// control plane (etcd, kube-apiserver, kwok nodes). Every e2e test, benchmark
// and `make up` goes through it.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// Names shared by Slurm and Kubernetes in the lab (package slurmconf).
const (
	ClusterName    = slurmconf.ClusterName
	Partition      = slurmconf.Partition
	ScalePartition = slurmconf.ScalePartition
	GPUsPerNode    = slurmconf.GPUsPerNode
	GPUType        = slurmconf.GPUType
	NodeCPUs       = slurmconf.NodeCPUs
	NodeMemoryMB   = slurmconf.NodeMemoryMB
)

// Ports on 127.0.0.1. They sit away from the daemons' defaults so a real
// Slurm or Kubernetes on the host never collides with the lab.
const (
	APIServerPort    = controlplane.APIServerPort
	SlurmctldPort    = slurmconf.SlurmctldPort
	SlurmdbdPort     = slurmconf.SlurmdbdPort
	MariaDBPort      = slurmconf.MariaDBPort
	SlurmrestdPort   = 26820
	SlurmdPortBase   = slurmconf.SlurmdPortBase
	DynSlurmdPort0   = 26950 // dyn-i's slurmd listens on DynSlurmdPort0+i
	defaultNodes     = 4
	maxLabNodes      = 64
	maxExtraNodes    = 20000
	maxJobs          = 1000000
	defaultDynNodes  = 5
	maxDynNodes      = 32
	tokenLifetime    = 24 * time.Hour
	tokenRenewBefore = 12 * time.Hour
)

// Config says where the lab lives and how big it is.
type Config struct {
	// Dir holds everything the lab makes: rootfs, binaries, logs, pids, keys.
	Dir string
	// Nodes is the number of GPU nodes with a real slurmd (gpu-0 ... gpu-N-1).
	Nodes int
	// ExtraNodes is the number of Slurm-only nodes (sim-0000 ...) for scale
	// benchmarks; each also gets a kwok Node of the same name.
	ExtraNodes int
	// DynNodes is the number of kwok Nodes (dyn-0 ...) that Slurm does not
	// list: their slurmd runs from a slurmd pod through the lab kubelet and
	// registers itself (slurmd -Z), as the NodeSet controller's pods do.
	DynNodes int
	// MaxJobs is slurmctld's MaxJobCount (ONEPOOL_LAB_MAX_JOBS; 0:
	// Slurm's default, 10,000): the scale benchmark's queue of other
	// users' jobs.
	MaxJobs int
	// Slurm is the Slurm release (ONEPOOL_LAB_SLURM; default 24.11).
	Slurm SlurmVersion
	// Kube is the Kubernetes release of the API server (ONEPOOL_LAB_KUBE;
	// default 1.35, the one onepool is built from).
	Kube controlplane.KubeRelease
	// Log receives one line per step.
	Log io.Writer
}

// ConfigFromEnv reads ONEPOOL_LAB_DIR, ONEPOOL_LAB_NODES,
// ONEPOOL_LAB_EXTRA_NODES, ONEPOOL_LAB_DYN_NODES, ONEPOOL_LAB_MAX_JOBS,
// ONEPOOL_LAB_SLURM and ONEPOOL_LAB_KUBE. Without ONEPOOL_LAB_DIR it uses .lab at the top of
// the repository that holds the working directory.
func ConfigFromEnv() (Config, error) {
	c := Config{Dir: os.Getenv("ONEPOOL_LAB_DIR"), Nodes: defaultNodes, DynNodes: defaultDynNodes, Log: os.Stderr}
	if c.Dir == "" {
		top, err := repoRoot()
		if err != nil {
			return c, err
		}
		c.Dir = filepath.Join(top, ".lab")
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("lab dir: %w", err)
	}
	c.Dir = abs
	for _, v := range []struct {
		env string
		dst *int
		max int
	}{{"ONEPOOL_LAB_NODES", &c.Nodes, maxLabNodes}, {"ONEPOOL_LAB_EXTRA_NODES", &c.ExtraNodes, maxExtraNodes},
		{"ONEPOOL_LAB_DYN_NODES", &c.DynNodes, maxDynNodes}, {"ONEPOOL_LAB_MAX_JOBS", &c.MaxJobs, maxJobs}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > v.max {
			return c, fmt.Errorf("%s=%q: want a number from 0 to %d", v.env, s, v.max)
		}
		*v.dst = n
	}
	rel, err := rootfs.Named(os.Getenv(rootfs.EnvSlurm))
	if err != nil {
		return c, err
	}
	c.Slurm = rel
	if c.Kube, err = controlplane.KubeNamed(os.Getenv(controlplane.EnvKube)); err != nil {
		return c, err
	}
	if c.Nodes < 1 {
		return c, errors.New("ONEPOOL_LAB_NODES: the lab needs at least one GPU node")
	}
	// gpu-i listens on SlurmdPortBase+i: the two port ranges must not meet.
	if c.DynNodes > 0 && SlurmdPortBase+c.Nodes > DynSlurmdPort0 {
		return c, fmt.Errorf("ONEPOOL_LAB_NODES=%d with dynamic nodes: at most %d (or ONEPOOL_LAB_DYN_NODES=0)", c.Nodes, DynSlurmdPort0-SlurmdPortBase)
	}
	return c, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "test", "lab")); err == nil {
				return d, nil
			}
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("no onepool checkout above %s: set ONEPOOL_LAB_DIR", dir)
		}
	}
}

// Lab is a configured lab; its methods bring it up, reach it and stop it.
type Lab struct {
	cfg Config
	// componentREST, when set, is the slurmrestd URL onepool's components
	// are started with instead of RESTURL() (a test's fault proxy).
	componentREST string
	// procs starts and stops the lab's daemons (pid files in run/pids).
	procs proc.Supervisor
}

// New checks the configuration; it starts nothing.
func New(cfg Config) (*Lab, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("lab dir %q must be an absolute path", cfg.Dir)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Slurm.Name == "" {
		cfg.Slurm = rootfs.Default()
	}
	l := &Lab{cfg: cfg}
	l.procs = proc.Supervisor{PidDir: l.path("run", "pids"), LogDir: l.LogDir()}
	return l, nil
}

// Config returns the lab's configuration.
func (l *Lab) Config() Config { return l.cfg }

func (l *Lab) path(elem ...string) string {
	return filepath.Join(append([]string{l.cfg.Dir}, elem...)...)
}

// RootFS and the paths below are the ones other code and tests use.
func (l *Lab) RootFS() string     { return l.path(l.cfg.Slurm.Folder()) }
func (l *Lab) BinDir() string     { return l.path("bin") }
func (l *Lab) LogDir() string     { return l.path("logs") }
func (l *Lab) Kubeconfig() string { return l.path("run", "kubeconfig") }
func (l *Lab) TokenFile() string  { return l.path("run", "slurm-token") }
func (l *Lab) RESTURL() string    { return fmt.Sprintf("http://127.0.0.1:%d", SlurmrestdPort) }
func (l *Lab) Kubectl() string    { return filepath.Join(l.BinDir(), "kubectl") }

// JWTKeyFile is the cluster's HS256 key slurmctld and slurmrestd check
// tokens with.
func (l *Lab) JWTKeyFile() string { return filepath.Join(l.RootFS(), "etc/slurm/jwt_hs256.key") }

// NodeNames are the GPU nodes that run a real slurmd.
func (l *Lab) NodeNames() []string {
	names := make([]string, l.cfg.Nodes)
	for i := range names {
		names[i] = "gpu-" + strconv.Itoa(i)
	}
	return names
}

// ExtraNodeNames are the Slurm-only scale nodes.
func (l *Lab) ExtraNodeNames() []string {
	names := make([]string, l.cfg.ExtraNodes)
	for i := range names {
		names[i] = fmt.Sprintf("sim-%04d", i)
	}
	return names
}

type step struct {
	name string
	run  func(context.Context) error
}

func (l *Lab) runSteps(ctx context.Context, steps []step) error {
	for _, s := range steps {
		start := time.Now()
		if err := s.run(ctx); err != nil {
			fmt.Fprintf(l.cfg.Log, "lab: %-18s FAILED after %s\n", s.name, time.Since(start).Round(10*time.Millisecond))
			return fmt.Errorf("lab step %q: %w", s.name, err)
		}
		fmt.Fprintf(l.cfg.Log, "lab: %-18s ok (%s)\n", s.name, time.Since(start).Round(10*time.Millisecond))
	}
	return nil
}

func (l *Lab) checkRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (chroot, mount, mknod): run it as root")
	}
	return nil
}

// Up brings the whole lab up, reusing whatever already runs. It is safe to
// call again on a running lab.
func (l *Lab) Up(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	start := time.Now()
	steps := append(append(l.slurmSteps(), l.kubeSteps()...), l.onepoolSteps()...)
	steps = append(steps, l.realNodeSteps()...) // ONEPOOL_LAB_REAL_KUBELET=1 only
	steps = append(steps, l.chartSteps()...)    // ONEPOOL_LAB_COMPONENTS=chart only
	if err := l.runSteps(ctx, steps); err != nil {
		return err
	}
	fmt.Fprintf(l.cfg.Log, "lab: up in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// UpSlurm brings up only the Slurm half.
func (l *Lab) UpSlurm(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	return l.runSteps(ctx, l.slurmSteps())
}

// EnsureRootFS builds the Slurm chroot, or installs a changed package list
// into it, and starts nothing: the one step that needs the network, for
// callers that run the daemons where there is none (a network namespace).
func (l *Lab) EnsureRootFS(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	// apt mounts proc in the chroot; a running lab keeps its mounts.
	procfs := filepath.Join(l.RootFS(), "proc")
	wasMounted := mount.IsMounted(procfs)
	err := l.runSteps(ctx, []step{{"slurm rootfs", l.ensureRootFS}})
	if !wasMounted && mount.IsMounted(procfs) {
		err = errors.Join(err, mount.UnmountUnder(procfs))
	}
	return err
}

// Down stops every lab process and unmounts everything under the rootfs. The
// cached rootfs and binaries stay.
func (l *Lab) Down(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	var errs []error
	// The real node (if it ever ran) first: its pods go through the apiserver.
	errs = append(errs, l.StopNode(ctx))
	// The kubelet first: its slurmd stop quickly while slurmctld still answers.
	errs = append(errs, l.StopKubelet(), l.stopStaticDRA())
	for _, name := range []string{schedulerName(1), schedulerName(0), "scheduler-service", "onepool-controller-manager", "lws-controller", "jobset-controller", "kueue-controller", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "slurmrestd"} {
		errs = append(errs, l.procs.Stop(name))
	}
	for _, n := range l.NodeNames() {
		errs = append(errs, l.procs.Stop("slurmd-"+n))
	}
	errs = append(errs, l.procs.Stop("slurmctld"), l.procs.Stop("slurmdbd"), l.procs.Stop("mariadbd"), l.procs.Stop("munged"))
	// Job steps, stray slurmd of an old config, anything else left inside
	// the chroot: of every release's rootfs, whichever ran.
	for _, r := range rootfs.Releases() {
		root := l.path(r.Folder())
		errs = append(errs, proc.KillChrooted(root), mount.UnmountUnder(root))
	}
	_ = os.Remove(l.releaseMarker())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(l.cfg.Log, "lab: down")
	return nil
}
