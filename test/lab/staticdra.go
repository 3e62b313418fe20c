package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The static GPU nodes (gpu-N) publish their GPUs as DRA devices like
// every onepool node, so a plain nvidia.com/gpu pod, which the GPU webhook
// turns into a claim, is placed on them (the README's example on `make
// up`). Their slurmd runs as a lab process, not from a NodeSet's pod, so
// the node agent's DRA driver runs beside it as a process too: `dra`,
// with the lab's fake GPUs and the admin's kubeconfig, no kubelet
// registration (kwok Nodes have no kubelet to prepare claims).

// AgentMetricsPort is gpu-0's node agent /metrics (HTTPS to the callers
// the API server allows to get /metrics, as the slurm chart's
// dra.metricsPort); gpu-N's is AgentMetricsPort+N.
const AgentMetricsPort = 26100

// AgentMetricsURL is the /metrics of static node node's agent ("" for a
// node that is not one of NodeNames).
func (l *Lab) AgentMetricsURL(node string) string {
	for i, n := range l.NodeNames() {
		if n == node {
			return fmt.Sprintf("https://127.0.0.1:%d/metrics", AgentMetricsPort+i)
		}
	}
	return ""
}

// staticDRADaemon is gpu-N's DRA driver.
func (l *Lab) staticDRADaemon(node string) daemon {
	metrics := strings.TrimSuffix(strings.TrimPrefix(l.AgentMetricsURL(node), "https://"), "/metrics")
	return daemon{
		Name: staticDRAName(node),
		Argv: []string{filepath.Join(l.BinDir(), "onepool-node-agent"), "dra",
			"--node-name", node, "--gpu-inventory", l.path("run", "fake-gpus-host.json"),
			"--kubeconfig", l.Kubeconfig(),
			"--dra-plugin-dir", l.path("run", "dra", node), "--dra-registrar-dir", "",
			"--cdi-dir", l.path("run", "cdi", node), "--driver-root", filepath.Join(l.RootFS(), FakeDriverRoot),
			"--metrics-bind-address", metrics},
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// hostGPUInventory is the fake GPU list as the host sees it: the device
// files of the lab's rootfs (the agent checks they exist).
func (l *Lab) hostGPUInventory() (string, error) {
	var inv struct {
		GPUs []fakeGPU `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(fakeGPUInventory()), &inv); err != nil {
		return "", err
	}
	for i := range inv.GPUs {
		inv.GPUs[i].Device = filepath.Join(l.RootFS(), inv.GPUs[i].Device)
	}
	b, err := json.MarshalIndent(inv, "", "  ")
	return string(b) + "\n", err
}

// startStaticDRA starts the DRA drivers of the static nodes and waits
// until each has published its ResourceSlice. Without a built node agent
// it says so and starts nothing.
func (l *Lab) startStaticDRA(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(l.BinDir(), "onepool-node-agent")); err != nil {
		fmt.Fprintf(l.cfg.Log, "lab:   %s is not built; the static nodes publish no DRA devices\n", filepath.Join(l.BinDir(), "onepool-node-agent"))
		return nil
	}
	inv, err := l.hostGPUInventory()
	if err != nil {
		return err
	}
	// Another release's rootfs holds the device files now: restart.
	changed, err := rootfs.WriteIfChanged(l.path("run", "fake-gpus-host.json"), inv)
	if err != nil {
		return err
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	for _, n := range l.NodeNames() {
		d := l.staticDRADaemon(n)
		published := func(ctx context.Context) error {
			sl, err := kc.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n + ",spec.driver=" + keys.GPUDriverName})
			if err != nil {
				return err
			}
			for _, s := range sl.Items {
				if len(s.Spec.Devices) == GPUsPerNode {
					return nil
				}
			}
			return fmt.Errorf("no ResourceSlice of %s with %d devices for %s yet", keys.GPUDriverName, GPUsPerNode, n)
		}
		// A running driver whose slice is gone (its Node was deleted and
		// made again, as the soak does: the slice went with the old Node)
		// publishes for the old Node: it starts again.
		if l.procs.Running(d) != 0 && (changed || !l.procs.RunsArgv(d) || published(ctx) != nil) {
			if err := l.procs.Stop(d.Name); err != nil {
				return err
			}
		}
		if _, err := l.procs.Start(d); err != nil {
			return err
		}
		if err := l.procs.Await(ctx, d, 30*time.Second, l.procs.OutFile(d.Name), published); err != nil {
			return err
		}
	}
	return nil
}

// stopStaticDRA stops every static node's DRA driver the lab started, by
// its pid file: not only the nodes of this LAB_NODES, since a lab brought
// up with more (bench-scheduler's 32) would leave the others' running.
func (l *Lab) stopStaticDRA() error {
	files, err := filepath.Glob(l.procs.PidFile(staticDRAName("*")))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		errs = append(errs, l.procs.Stop(strings.TrimSuffix(filepath.Base(f), ".pid")))
	}
	return errors.Join(errs...)
}

// staticDRAName is the daemon name of static node node's DRA driver.
func staticDRAName(node string) string { return "dra-" + node }
