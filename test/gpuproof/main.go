// Command gpuproof is the real-GPU proof of issue 37 item 6 (see README.md):
// it finds the GPUs the way the node agent does (NVML, or --gpu-inventory),
// builds the agent's DRA driver as cmd/onepool-node-agent does but without a
// kubelet or apiserver, prepares a hand-built ResourceClaim for min(--count,
// GPUs) of them, and checks the CDI spec it writes: exactly the claimed
// GPUs' device nodes (plus control devices), each opened O_RDWR. It exits 1
// when a check fails; the last line is "PROOF OK" or "PROOF FAIL: ...".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/agent/dra"
	"github.com/onepool/onepool/keys"
)

// nvidiaMajor is the NVIDIA driver's character device major (/dev/nvidiaN is 195:N).
const nvidiaMajor = 195

type options struct {
	inventory, cdiDir, nodeName, driverRoot, cdiHook string
	count                                            int
}

func main() {
	var o options
	flag.StringVar(&o.inventory, "gpu-inventory", "", "the agent's JSON GPU inventory instead of NVML (a proof without a GPU)")
	flag.StringVar(&o.cdiDir, "cdi-dir", "", "where the CDI spec is written (default: a temp dir, removed at exit)")
	flag.StringVar(&o.nodeName, "node-name", "proof", "the node, and so the DRA pool, the claim is allocated from")
	flag.IntVar(&o.count, "count", 2, "GPUs to claim (at most the node's)")
	flag.StringVar(&o.driverRoot, "driver-root", "/", "the NVIDIA driver's root: its libraries go into the CDI spec (empty: none)")
	flag.StringVar(&o.cdiHook, "cdi-hook", "", "NVIDIA's nvidia-cdi-hook for the spec's update-ldcache hook (default: /usr/bin/nvidia-cdi-hook where the NVIDIA Container Toolkit put it; empty and none there: no hook)")
	mig := flag.Bool("mig", false, "instead of the proof: what NVML says of MIG on each GPU, read-only (mode, profiles, placements, instances)")
	flag.Parse()
	if *mig {
		if err := migSurvey(os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "gpuproof --mig: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run(context.Background(), o, os.Stdout))
}

// proof collects failed checks; every step prints what it saw.
type proof struct {
	out   io.Writer
	fails []string
}

func (p *proof) printf(format string, a ...any) { fmt.Fprintf(p.out, format, a...) }

func (p *proof) fail(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	p.printf("FAIL: %s\n", msg)
	p.fails = append(p.fails, msg)
}

func run(ctx context.Context, o options, out io.Writer) int {
	p := &proof{out: out}
	p.run(ctx, o)
	if len(p.fails) > 0 {
		p.printf("PROOF FAIL: %s\n", strings.Join(p.fails, "; "))
		return 1
	}
	p.printf("PROOF OK\n")
	return 0
}

func (p *proof) run(ctx context.Context, o options) {
	if o.count < 1 {
		p.fail("--count must be at least 1")
		return
	}
	tmp, err := os.MkdirTemp("", "gpuproof-")
	if err != nil {
		p.fail("temp dir: %v", err)
		return
	}
	defer os.RemoveAll(tmp)
	if o.cdiDir == "" {
		o.cdiDir = filepath.Join(tmp, "cdi")
	}

	source := "NVML (libnvidia-ml.so.1)"
	if o.inventory != "" {
		source = "GPU inventory " + o.inventory + " (FAKE: no NVML)"
	}
	p.printf("== GPUs from %s\n", source)
	gpus, err := agent.Discover(ctx, agent.NewLibrary(o.inventory))
	if err != nil {
		p.fail("%v", err)
		return
	}
	p.printGPUs(gpus)
	if len(gpus) == 0 {
		p.fail("no GPUs found")
		return
	}

	inv, err := dra.NewInventory(gpus)
	if err != nil {
		p.fail("DRA inventory: %v", err)
		return
	}
	var driver []agent.DriverFile
	if o.driverRoot != "" {
		p.printf("\n== The driver's files under %s (CDI mounts)\n", o.driverRoot)
		driver, err = agent.DriverRoot{Host: o.driverRoot, Dir: o.driverRoot}.Files()
		switch {
		case err != nil && o.inventory == "":
			p.fail("driver root: %v", err)
		case err != nil:
			p.printf("none (FAKE GPUs): %v\n", err)
		}
		for _, f := range driver {
			p.printf("%s <- %s\n", f.ContainerPath, f.HostPath)
		}
	}
	hook := o.cdiHook
	if hook == "" {
		if _, err := os.Stat("/usr/bin/nvidia-cdi-hook"); err == nil {
			hook = "/usr/bin/nvidia-cdi-hook"
		}
	}
	if len(driver) > 0 {
		p.printf("nvidia-cdi-hook: %q (empty: the spec has no ldcache hook)\n", hook)
	}
	drv, err := dra.New(dra.Config{NodeName: o.nodeName, PluginDir: filepath.Join(tmp, "plugin"), CDIDir: o.cdiDir,
		ControlDevices: dra.ControlDevices, DriverFiles: driver, CDIHook: hook, Log: log.New(p.out, "  driver log: ", 0)}, inv)
	if err != nil {
		p.fail("DRA driver: %v", err)
		return
	}
	p.printf("\n== ResourceSlice devices (driver %s, pool %q)\n", keys.GPUDriverName, o.nodeName)
	for _, pool := range drv.Resources().Pools {
		for _, s := range pool.Slices {
			p.printJSON(s.Devices)
		}
	}

	names := make([]string, 0, o.count) // the first GPUs in GRES order
	for _, d := range inv.Devices[:min(o.count, len(inv.Devices))] {
		names = append(names, d.Name)
	}
	claim := newClaim("gpuproof-claim-a", "a", o.nodeName, names...)
	p.printf("\n== Prepare claim %s/%s (uid %s): %s\n", claim.Namespace, claim.Name, claim.UID, strings.Join(names, ","))
	res, ok := p.prepare(ctx, drv, claim)
	if !ok {
		return
	}
	p.checkSpec(o.cdiDir, claim.UID, res, names, inv, o.inventory != "")

	p.printf("\n== Claims the driver must refuse\n")
	missing := dra.DeviceName(slices.Max(minors(gpus)) + 1)
	p.refuse(ctx, drv, newClaim("gpuproof-claim-b", "b", o.nodeName, missing), o.cdiDir, dra.ErrUnknownDevice,
		fmt.Sprintf("%s (no GPU with that minor on this node)", missing))
	p.refuse(ctx, drv, newClaim("gpuproof-claim-c", "c", o.nodeName, names[0]), o.cdiDir, dra.ErrDeviceBusy,
		fmt.Sprintf("%s again (held by claim a)", names[0]))

	p.printf("\n== Unprepare claim a\n")
	errs, err := drv.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: claim.UID,
		NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}}})
	if err == nil {
		err = errs[claim.UID]
	}
	if err != nil {
		p.fail("unprepare: %v", err)
	} else if f := specFiles(o.cdiDir, claim.UID); len(f) > 0 {
		p.fail("unprepare left the CDI spec %s", f[0])
	} else {
		p.printf("unprepared; CDI spec removed\n")
	}
}

func (p *proof) printGPUs(gpus []agent.GPU) {
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tGRES TYPE\tUUID\tMINOR\tMEMORY\tDEVICE")
	for _, g := range gpus {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d MiB\t%s\n", g.Index, g.Name, g.Type(), g.UUID, g.Minor, g.MemoryMiB, g.Device)
	}
	tw.Flush()
	for _, g := range gpus { // for run.sh's comparison with nvidia-smi
		p.printf("gpu-id index=%d uuid=%s minor=%d\n", g.Index, g.UUID, g.Minor)
	}
	p.printf("GRES order:")
	for i, g := range agent.GresOrder(gpus) {
		p.printf(" %d=%s", i, g.Device)
	}
	p.printf("\nGres=%s\n# gres.conf\n%s", agent.GresString(gpus), agent.GresConf(gpus))
}

func (p *proof) printJSON(v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		p.fail("json: %v", err)
		return
	}
	p.printf("%s\n", b)
}

func minors(gpus []agent.GPU) []int {
	out := make([]int, len(gpus))
	for i, g := range gpus {
		out[i] = g.Minor
	}
	return out
}

// newClaim is a claim as the scheduler leaves it: allocated, one result per
// device of this node's pool.
func newClaim(uid, name, pool string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "gpuproof", Name: name, UID: types.UID(uid)}}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: keys.GPUDriverName, Pool: pool, Device: d})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

func (p *proof) prepare(ctx context.Context, drv *dra.Driver, c *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool) {
	out, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err == nil {
		err = out[c.UID].Err
	}
	if err != nil {
		p.fail("prepare %s: %v", c.Name, err)
		return kubeletplugin.PrepareResult{}, false
	}
	for _, d := range out[c.UID].Devices {
		p.printf("prepared %s (pool %s, request %s): CDI %s\n", d.DeviceName, d.PoolName, strings.Join(d.Requests, ","), strings.Join(d.CDIDeviceIDs, ","))
	}
	return out[c.UID], true
}

func (p *proof) refuse(ctx context.Context, drv *dra.Driver, c *resourceapi.ResourceClaim, cdiDir string, want error, what string) {
	out, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err == nil {
		err = out[c.UID].Err
	}
	switch {
	case err == nil:
		p.fail("claim %s for %s was prepared, want %q", c.Name, what, want)
	case !errors.Is(err, want):
		p.fail("claim %s for %s: %v, want %q", c.Name, what, err, want)
	case len(specFiles(cdiDir, c.UID)) > 0:
		p.fail("claim %s was refused but has a CDI spec", c.Name)
	default:
		p.printf("claim %s for %s: refused: %v\n", c.Name, what, err)
	}
}

// cdiSpec is the part of a CDI spec (github.com/cncf-tags/container-device-interface) the proof reads.
type cdiSpec struct {
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	DeviceNodes []struct {
		Path     string `json:"path"`
		HostPath string `json:"hostPath"`
	} `json:"deviceNodes"`
	Mounts []struct {
		HostPath      string `json:"hostPath"`
		ContainerPath string `json:"containerPath"`
	} `json:"mounts"`
	Hooks []json.RawMessage `json:"hooks"`
}

func specFiles(dir string, uid types.UID) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*"+string(uid)+"*.json"))
	return files
}

// checkSpec reads the claim's CDI spec and checks its device nodes: each CDI
// device the kubelet was given has exactly its GPU's device file plus control
// devices, and each node opens read-write.
func (p *proof) checkSpec(cdiDir string, uid types.UID, res kubeletplugin.PrepareResult, names []string, inv *dra.Inventory, fake bool) {
	files := specFiles(cdiDir, uid)
	if len(files) != 1 {
		p.fail("want one CDI spec for claim uid %s in %s, found %v", uid, cdiDir, files)
		return
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		p.fail("CDI spec: %v", err)
		return
	}
	p.printf("\n== CDI spec %s\n%s", files[0], raw)
	var spec cdiSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		p.fail("CDI spec %s: %v", files[0], err)
		return
	}

	p.printf("\n== CDI device nodes of the claim\n")
	var gpuNodes, nodes []string // nodes: every distinct device node, in spec order
	var mounts []string
	addNodes := func(e cdiEdits) {
		for _, n := range e.DeviceNodes {
			path := n.Path
			if n.HostPath != "" {
				path = n.HostPath
			}
			if !slices.Contains(nodes, path) {
				nodes = append(nodes, path)
			}
		}
		for _, m := range e.Mounts {
			mounts = append(mounts, m.HostPath+" -> "+m.ContainerPath)
		}
	}
	addNodes(spec.ContainerEdits)
	for _, d := range res.Devices {
		gpu := inv.ByName[d.DeviceName]
		for _, id := range d.CDIDeviceIDs {
			i := slices.IndexFunc(spec.Devices, func(s cdiDevice) bool { return spec.Kind+"="+s.Name == id })
			if i < 0 {
				p.fail("CDI device %s (given to the kubelet) is not in the spec", id)
				continue
			}
			var own []string
			for _, n := range spec.Devices[i].ContainerEdits.DeviceNodes {
				if !slices.Contains(dra.ControlDevices, n.Path) {
					own = append(own, n.Path)
				}
			}
			if !slices.Equal(own, []string{gpu.Device}) {
				p.fail("CDI device %s has GPU nodes %v, want [%s]", id, own, gpu.Device)
			}
			gpuNodes = append(gpuNodes, own...)
			addNodes(spec.Devices[i].ContainerEdits)
		}
	}
	if len(spec.Devices) != len(names) {
		p.fail("CDI spec has %d devices, the claim %d", len(spec.Devices), len(names))
	}

	for _, path := range nodes {
		role := "control device"
		g, isGPU := gpuOf(inv, path)
		switch {
		case isGPU:
			role = fmt.Sprintf("GPU %s (minor %d, %s)", dra.DeviceName(g.Minor), g.Minor, g.UUID)
		case !slices.Contains(dra.ControlDevices, path):
			role = "UNEXPECTED"
			p.fail("CDI spec names %s, neither a claimed GPU nor a control device", path)
		}
		p.printf("%-28s %s\n", path, role)
		p.printf("    %s\n", describeNode(path))
		if isGPU && !fake && !isNvidiaNode(path, g.Minor) {
			p.fail("%s is not the character device %d:%d of NVML's minor", path, nvidiaMajor, g.Minor)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			p.fail("open %s O_RDWR: %v", path, err)
			continue
		}
		p.printf("    open O_RDWR by pid %d: ok\n", os.Getpid())
		f.Close()
	}
	slices.Sort(gpuNodes)
	var want []string
	for _, n := range names {
		want = append(want, inv.ByName[n].Device)
	}
	slices.Sort(want)
	if slices.Equal(gpuNodes, want) {
		p.printf("GPU device nodes are exactly the claimed GPUs': %s\n", strings.Join(want, " "))
	} else {
		p.fail("GPU device nodes %v, want exactly %v", gpuNodes, want)
	}
	var control []string
	for _, c := range dra.ControlDevices {
		if slices.Contains(nodes, c) {
			control = append(control, c)
		}
	}
	p.printf("control devices in the spec: %v (the driver adds those of %v that exist)\n", control, dra.ControlDevices)
	if len(mounts) == 0 {
		p.printf("CDI spec carries no driver libraries (issue 37 item 3 not done)\n")
	} else {
		p.printf("CDI spec mounts: %s\n", strings.Join(mounts, ", "))
	}
}

func gpuOf(inv *dra.Inventory, path string) (agent.GPU, bool) {
	for _, g := range inv.ByName {
		if g.Device == path {
			return g, true
		}
	}
	return agent.GPU{}, false
}

// devNumber splits a Linux dev_t (glibc's gnu_dev_major/minor).
func devNumber(rdev uint64) (major, minor uint64) {
	return (rdev>>8)&0xfff | (rdev>>32)&^0xfff, rdev&0xff | (rdev>>12)&^0xff
}

func describeNode(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return err.Error()
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return fmt.Sprintf("not a character device (mode %o)", st.Mode)
	}
	major, minor := devNumber(st.Rdev)
	return fmt.Sprintf("character device %d:%d", major, minor)
}

func isNvidiaNode(path string, minor int) bool {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return false
	}
	ma, mi := devNumber(st.Rdev)
	return ma == nvidiaMajor && mi == uint64(minor)
}
