package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/agent/dra"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest/model"
)

// Environment variables of the DRA driver's flags.
const (
	envDRA             = "ONEPOOL_DRA"
	envKubeconfig      = "KUBECONFIG"
	envDRAPluginDir    = "ONEPOOL_DRA_PLUGIN_DIR"
	envDRARegistrarDir = "ONEPOOL_DRA_REGISTRAR_DIR"
	envCDIDir          = "ONEPOOL_CDI_DIR"
	envDriverRoot      = "ONEPOOL_DRIVER_ROOT"
	envDriverRootDir   = "ONEPOOL_DRIVER_ROOT_DIR"
	envHostGresConf    = "ONEPOOL_HOST_GRES_CONF"
	envCDIHook         = "ONEPOOL_CDI_HOOK"
)

// kubeTimeout bounds every call the driver makes to the apiserver.
const kubeTimeout = 30 * time.Second

type draFlags struct {
	enabled                                            bool
	kubeNode, kubeconfig, pluginDir, registrar, cdiDir string
	driverRoot, driverRootDir, cdiHook                 string
	hostGresConf                                       string
}

func addDRAFlags(f *envFlags, d *draFlags) {
	f.Bool(&d.enabled, "dra", envDRA, false, "also be the node's DRA driver for its GPUs (publish a ResourceSlice, prepare claims)")
	f.String(&d.kubeNode, "kube-node-name", keys.EnvKubeNodeName, "", "the Kubernetes node (spec.nodeName from the downward API; default: --node-name)")
	f.String(&d.kubeconfig, "kubeconfig", envKubeconfig, "", "kubeconfig for the DRA driver (default: in-cluster)")
	f.String(&d.pluginDir, "dra-plugin-dir", envDRAPluginDir, dra.DefaultPluginDir, "DRA socket and prepared-claims state (a hostPath the kubelet sees at the same path)")
	f.String(&d.registrar, "dra-registrar-dir", envDRARegistrarDir, dra.DefaultRegistrarDir, "the kubelet's plugins_registry (empty: serve the socket without registering)")
	f.String(&d.cdiDir, "cdi-dir", envCDIDir, dra.DefaultCDIDir, "where CDI specs for prepared claims are written")
	f.String(&d.driverRoot, "driver-root", envDriverRoot, "", "the NVIDIA driver's root on the node (/ for a driver installed on the host, /run/nvidia/driver for the GPU Operator's): its libraries and nvidia-smi go into every GPU container (CDI mounts at /usr/local/nvidia/{lib64,bin}); empty: none (a lab without a driver)")
	f.String(&d.driverRootDir, "driver-root-dir", envDriverRootDir, "", "where this container sees --driver-root (its mount of it; default: --driver-root itself)")
	f.String(&d.cdiHook, "cdi-hook", envCDIHook, "", "the node's path of NVIDIA's nvidia-cdi-hook (the NVIDIA Container Toolkit's: /usr/bin/nvidia-cdi-hook, /usr/local/nvidia/toolkit/nvidia-cdi-hook with the GPU Operator): with --driver-root, each claim's CDI spec has it update the container's ld.so.cache with the driver's libraries, as NVIDIA's CDI generator does; empty: no hook")
	f.String(&d.hostGresConf, "host-gres-conf", envHostGresConf, "", "a node whose slurmd runs on the host: the host's gres.conf (as this container sees it); the GPUs are numbered as that slurmd numbers them from it (types in the order of the node's Gres=, read with scontrol when gres.conf has more than one). Empty: onepool's own order (the gres.conf `run` writes)")
}

// inventory numbers the GPUs as the node's slurmd does: onepool's order,
// or the host's gres.conf's (--host-gres-conf).
func (d draFlags) inventory(ctx context.Context, slurmNode string, gpus []agent.GPU) (*dra.Inventory, error) {
	if d.hostGresConf == "" {
		return dra.NewInventory(gpus)
	}
	b, err := os.ReadFile(d.hostGresConf)
	if err != nil {
		return nil, fmt.Errorf("--host-gres-conf: %w", err)
	}
	lines, err := agent.ParseGresConf(string(b), slurmNode)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.hostGresConf, err)
	}
	types := agent.GresConfTypes(lines)
	if len(types) > 1 {
		gres, err := scontrolNodeGres(ctx, slurmNode)
		if err != nil {
			return nil, err
		}
		types = agent.NodeGresTypes(gres)
	}
	ordered, err := agent.HostGresOrder(gpus, lines, types)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.hostGresConf, err)
	}
	return dra.NewInventoryInOrder(ordered)
}

// scontrolNodeGres is the node's Gres= as slurmctld has it from slurm.conf.
func scontrolNodeGres(ctx context.Context, node string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "show", "node", node).CombinedOutput()
	if err != nil {
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return "", fmt.Errorf("scontrol show node %s: %w (%s)", node, err, line)
	}
	gres, ok := agent.ShowNodeGres(string(out))
	if !ok {
		return "", fmt.Errorf("scontrol show node %s: the node has no Gres=", node)
	}
	return gres, nil
}

// library is where the GPUs are found: the inventory in a lab, else NVML,
// from the driver root when there is one.
func (d draFlags) library(inventory string) agent.Library {
	if inventory != "" || d.driverRoot == "" {
		return agent.NewLibrary(inventory)
	}
	return agent.NewNVMLFrom(d.root().NVMLPath())
}

// root is --driver-root, and where this container sees it.
func (d draFlags) root() agent.DriverRoot {
	r := agent.DriverRoot{Host: d.driverRoot, Dir: d.driverRootDir}
	if r.Dir == "" {
		r.Dir = r.Host
	}
	return r
}

// driverFiles finds the driver's files under --driver-root (none without
// it): a root without NVML is an error, so that a driver not yet there (the
// GPU Operator's driver container still starting) restarts the driver
// rather than give pods GPUs CUDA cannot use.
func (d draFlags) driverFiles() ([]agent.DriverFile, error) {
	if d.driverRoot == "" {
		return nil, nil
	}
	files, err := d.root().Files()
	if err != nil {
		return nil, fmt.Errorf("DRA driver: --driver-root: %w", err)
	}
	return files, nil
}

// config is the DRA driver's Kubernetes config (--kubeconfig, else
// in-cluster): its client's, and the metrics reviews'.
func (d draFlags) config() (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: Kubernetes config: %w", err)
	}
	rc.Timeout = kubeTimeout
	rc.UserAgent = "onepool-node-agent"
	return rc, nil
}

// slurmNodeOf is the Slurm node behind Kubernetes Node kubeNode, by the
// rule the syncer drains it by (slurmnode.Of: the Node's
// onepool.dev/slurm-node-name label, else its name): a DaemonSet on the
// hosts of an existing Slurm cluster needs no per-node flag.
func slurmNodeOf(ctx context.Context, client kubernetes.Interface, kubeNode string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	n, err := client.CoreV1().Nodes().Get(ctx, kubeNode, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the Slurm node of Node %s: %w", kubeNode, err)
	}
	return slurmnode.Of(n), nil
}

// serve builds the DRA driver's run function; its errors come before slurmd
// starts (a bad kubeconfig), the rest are logged while slurmd runs.
func (d draFlags) serve(slurmNode string, logger *log.Logger) (func(context.Context, []agent.GPU) error, error) {
	client, err := d.client()
	if err != nil {
		return nil, err
	}
	return d.serveWith(client, slurmNode, logger)
}

// client is the DRA driver's Kubernetes client.
func (d draFlags) client() (kubernetes.Interface, error) {
	rc, err := d.config()
	if err != nil {
		return nil, err
	}
	return newClient(rc)
}

func newClient(rc *rest.Config) (kubernetes.Interface, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	return client, nil
}

func (d draFlags) serveWith(client kubernetes.Interface, slurmNode string, logger *log.Logger) (func(context.Context, []agent.GPU) error, error) {
	node := d.kubeNode
	if node == "" {
		node = slurmNode
	}
	driver, err := d.driverFiles()
	if err != nil {
		return nil, err
	}
	if len(driver) > 0 {
		logger.Printf("DRA driver: %d files of the NVIDIA driver under %s go into GPU containers", len(driver), d.driverRoot)
	}
	return func(ctx context.Context, gpus []agent.GPU) error {
		inv, err := d.inventory(ctx, slurmNode, gpus)
		if err != nil {
			return fmt.Errorf("DRA driver: %w", err)
		}
		drv, err := dra.New(dra.Config{NodeName: node, Client: client, PluginDir: d.pluginDir, RegistrarDir: d.registrar,
			CDIDir: d.cdiDir, ControlDevices: dra.ControlDevices, DriverFiles: driver, CDIHook: d.cdiHook, Log: logger, JobGPUs: scontrolJobGPUs(slurmNode)}, inv)
		if err != nil {
			return err
		}
		return dra.Serve(ctx, drv)
	}, nil
}

// scontrolJobGPUs asks slurmctld, as slurmd's node does (scontrol with the
// node's munge key), which GPUs a job holds on Slurm node node: none when
// it holds none there.
func scontrolJobGPUs(node string) dra.JobGPUs {
	return func(ctx context.Context, job uint32) ([]int, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "scontrol", "show", "job", "-d", strconv.FormatUint(uint64(job), 10)).CombinedOutput()
		if err != nil {
			line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			return nil, fmt.Errorf("scontrol show job -d %d: %w (%s)", job, err, line)
		}
		idx, err := model.ShowJobGPUIndexes(string(out), node)
		if errors.Is(err, model.ErrNoGPUIndexes) {
			return nil, nil
		}
		return idx, err
	}
}

// cmdDRA is the dra subcommand: the node's DRA driver alone, in a
// container of its own. The slurmd container, where jobs run, then holds
// no Kubernetes credential: only this container mounts the ServiceAccount
// token. It finds the GPUs as run does (the same NVML or inventory, so the
// same numbering as the gres.conf run writes) and serves until SIGTERM.
func cmdDRA(args []string, logger *log.Logger, stderr io.Writer) (int, error) {
	f := newFlags("dra", stderr)
	var nf nodeFlags
	var slurmNode string
	addNodeFlags(f, &nf)
	f.String(&slurmNode, "node-name", keys.EnvSlurmNodeName, "", "Slurm node name: the claims' jobs are checked against their GPUs there (default: the Slurm node of --kube-node-name's Node, its onepool.dev/slurm-node-name label or its name)")
	var df draFlags
	addDRAFlags(f, &df)
	var ms metricsServing
	addMetricsFlags(f, &ms)
	var stateDir string
	f.String(&stateDir, "state-dir", agent.EnvStateDir, agent.DefaultStateDir, "where run records XIDs (read by the health metrics when this container shares it)")
	if err := f.parse(args); err != nil {
		return 2, err
	}
	nc, err := nf.config()
	if err != nil {
		return 2, err
	}
	if slurmNode == "" && df.kubeNode == "" {
		return 2, errors.New("the Slurm node is required: --node-name (ONEPOOL_SLURM_NODE_NAME), or --kube-node-name (ONEPOOL_KUBE_NODE_NAME) to take it from that Node")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rc, err := df.config()
	if err != nil {
		return 2, err
	}
	client, err := newClient(rc)
	if err != nil {
		return 2, err
	}
	if slurmNode == "" {
		if slurmNode, err = slurmNodeOf(ctx, client, df.kubeNode); err != nil {
			return 1, err
		}
		logger.Printf("Node %s is Slurm node %s", df.kubeNode, slurmNode)
	}
	if err := agent.ValidateNodeName(slurmNode); err != nil {
		return 2, err
	}
	serve, err := df.serveWith(client, slurmNode, logger)
	if err != nil {
		return 2, err
	}
	mh, err := metricsHandler(slurmNode, df.library(nf.inventory), agent.HealthConfig{NodeName: slurmNode, ExpectedGPUs: nc.ExpectedGPUs, StateDir: stateDir})
	if err != nil {
		return 1, err
	}
	ms.kube = rc
	if err := ms.serve(ctx, mh, logger); err != nil {
		return 1, fmt.Errorf("metrics: %w", err)
	}
	gpus, err := agent.Discover(ctx, df.library(nf.inventory))
	if err != nil {
		return 1, err
	}
	if err := agent.CheckGPUCount(gpus, nc.ExpectedGPUs); err != nil {
		return 1, err
	}
	logger.Printf("DRA driver for %d GPUs of Slurm node %s", len(gpus), slurmNode)
	if err := serve(ctx, gpus); err != nil && ctx.Err() == nil {
		return 1, err
	}
	return 0, nil
}
