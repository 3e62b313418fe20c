package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/agent/dra"
	"github.com/onepool/onepool/keys"
)

// Environment variables of the DRA driver's flags.
const (
	envDRA             = "ONEPOOL_DRA"
	envKubeconfig      = "KUBECONFIG"
	envDRAPluginDir    = "ONEPOOL_DRA_PLUGIN_DIR"
	envDRARegistrarDir = "ONEPOOL_DRA_REGISTRAR_DIR"
	envCDIDir          = "ONEPOOL_CDI_DIR"
)

// kubeTimeout bounds every call the driver makes to the apiserver.
const kubeTimeout = 30 * time.Second

type draFlags struct {
	enabled                                            bool
	kubeNode, kubeconfig, pluginDir, registrar, cdiDir string
}

func addDRAFlags(f *envFlags, d *draFlags) {
	f.Bool(&d.enabled, "dra", envDRA, false, "also be the node's DRA driver for its GPUs (publish a ResourceSlice, prepare claims)")
	f.String(&d.kubeNode, "kube-node-name", keys.EnvKubeNodeName, "", "the Kubernetes node (spec.nodeName from the downward API; default: --node-name)")
	f.String(&d.kubeconfig, "kubeconfig", envKubeconfig, "", "kubeconfig for the DRA driver (default: in-cluster)")
	f.String(&d.pluginDir, "dra-plugin-dir", envDRAPluginDir, dra.DefaultPluginDir, "DRA socket and prepared-claims state (a hostPath the kubelet sees at the same path)")
	f.String(&d.registrar, "dra-registrar-dir", envDRARegistrarDir, dra.DefaultRegistrarDir, "the kubelet's plugins_registry (empty: serve the socket without registering)")
	f.String(&d.cdiDir, "cdi-dir", envCDIDir, dra.DefaultCDIDir, "where CDI specs for prepared claims are written")
}

// serve builds the DRA driver's run function; its errors come before slurmd
// starts (a bad kubeconfig), the rest are logged while slurmd runs.
func (d draFlags) serve(slurmNode string, logger *log.Logger) (func(context.Context, []agent.GPU) error, error) {
	node := d.kubeNode
	if node == "" {
		node = slurmNode
	}
	rc, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: Kubernetes config: %w", err)
	}
	rc.Timeout = kubeTimeout
	rc.UserAgent = "onepool-node-agent"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("DRA driver: %w", err)
	}
	return func(ctx context.Context, gpus []agent.GPU) error {
		inv, err := dra.NewInventory(gpus)
		if err != nil {
			return fmt.Errorf("DRA driver: %w", err)
		}
		drv, err := dra.New(dra.Config{NodeName: node, Client: client, PluginDir: d.pluginDir, RegistrarDir: d.registrar,
			CDIDir: d.cdiDir, ControlDevices: dra.ControlDevices, Log: logger}, inv)
		if err != nil {
			return err
		}
		return dra.Serve(ctx, drv)
	}, nil
}
