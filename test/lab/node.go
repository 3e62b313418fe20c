package lab

// The real node: containerd + runc + CNI bridge from Debian, and a real
// kubelet v1.35 (built into .lab/bin by `make node-tools`), registered as
// Node RealNodeName. It runs pods from onepool's own images (.lab/images,
// `make images`), imported into containerd: nothing is pulled from any
// registry. Off by default: ONEPOOL_LAB_REAL_KUBELET=1 adds it to `lab up`;
// `lab node up` brings up only etcd, kube-apiserver and this node.
//
// Everything it makes lives under .lab/node (containerd's root, state and
// socket, the kubelet's root dir, CNI config and IPAM state, pod logs), plus
// a cgroup /onepool-lab-<id> in each hierarchy and a bridge oplab<id>; Down
// removes pods, daemons, shims, mounts and cgroups again.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/kubenet"
	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/rootfs"
)

const (
	// EnvRealKubelet set to 1 adds the real node to `lab up` (and lets its tests run).
	EnvRealKubelet = "ONEPOOL_LAB_REAL_KUBELET"
	// EnvNodeIP overrides the node's InternalIP (default: the first
	// non-loopback IPv4 address of this network namespace).
	EnvNodeIP = "ONEPOOL_LAB_NODE_IP"
	// RealNodeName is the Node the real kubelet registers.
	RealNodeName = "lab-node"
	// RealNodeLabel marks that Node (not LabNodeLabel: ensureKubeNodes
	// deletes lab-labelled Nodes it does not know).
	RealNodeLabel = "lab.onepool.dev/real-kubelet"
	// PauseImage is the pod sandbox image, made by the lab from bin/pause.
	PauseImage = "localhost/onepool-lab/pause:3.10"
	// RealKubeletPort serves logs/exec on the node IP; the healthz port is on 127.0.0.1.
	RealKubeletPort        = 26250
	RealKubeletHealthzPort = 26248
	realPodSubnet          = "10.89.0.0/24"
	containerdDaemon       = "node-containerd"
	realKubeletDaemon      = "node-kubelet"
	// cniBinDir is where Debian's containernetworking-plugins installs them.
	cniBinDir = "/usr/lib/cni"
	nodePATH  = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// RealKubeletEnabled says whether ONEPOOL_LAB_REAL_KUBELET=1.
func RealKubeletEnabled() bool { return os.Getenv(EnvRealKubelet) == "1" }

func (l *Lab) nodePath(elem ...string) string { return l.path(append([]string{"node"}, elem...)...) }

// ContainerdSocket is the lab containerd's socket (for ctr --address).
func (l *Lab) ContainerdSocket() string { return l.nodePath("run", "containerd.sock") }

// NodeCDIDir is where the node's containerd reads CDI specs (the slurm
// chart's dra.cdiDir: the node agents write them there).
func (l *Lab) NodeCDIDir() string { return l.nodePath("cdi") }

// labID tells this lab's host-wide names (cgroup, bridge) from another lab's.
func (l *Lab) labID() string {
	sum := sha256.Sum256([]byte(l.cfg.Dir))
	return hex.EncodeToString(sum[:4])
}

func (l *Lab) nodeCgroup() string { return "onepool-lab-" + l.labID() }
func (l *Lab) nodeBridge() string { return "oplab" + l.labID() }

// realNodeSteps are the node's steps when ONEPOOL_LAB_REAL_KUBELET=1, else none.
func (l *Lab) realNodeSteps() []step {
	if !RealKubeletEnabled() {
		return nil
	}
	return l.nodeSteps()
}

func (l *Lab) nodeSteps() []step {
	return []step{
		{"node packages", l.ensureNodePackages},
		{"node tools", l.checkNodeTools},
		{"containerd", l.startContainerd},
		{"fake GPUs", ensureNodeFakeGPUs},
		{"node images", l.importNodeImages},
		{"kubelet", l.startRealKubelet},
		{"node ready", l.awaitNodeReady},
		// What the chart's pods need there: a scheduler for them, and
		// the apiserver and slurmrestd as Services.
		{"kube-scheduler", l.controlPlane().StartScheduler},
		{"cluster network", l.startClusterNet},
		{"node volumes", l.ensureNodePVs},
	}
}

// NodeFakeGPUDir holds the real node's fake GPUs: character devices with
// NVIDIA's major 195 and minors 0..NodeFakeGPUs-1, which no driver serves.
// It is the same path on the host and in the slurmd pod
// (charts/slurm/ci/lab-values.yaml mounts it and lists the GPUs), so the
// node agent's CDI specs name devices the runtime finds on the host. The
// chroot nodes' fakes are inside the rootfs, at the same path.
const (
	NodeFakeGPUDir = "/var/lib/fakegpu"
	NodeFakeGPUs   = 4
)

// ensureNodeFakeGPUs makes the real node's fake GPU device nodes.
func ensureNodeFakeGPUs(context.Context) error {
	if err := os.MkdirAll(NodeFakeGPUDir, 0o755); err != nil {
		return err
	}
	for i := range NodeFakeGPUs {
		if err := rootfs.MknodChar(filepath.Join(NodeFakeGPUDir, "nvidia"+strconv.Itoa(i)), 195, uint32(i), 0o666); err != nil {
			return err
		}
	}
	return nil
}

// UpNode brings up the Kubernetes control plane (etcd, kube-apiserver) and
// the real node, without Slurm, kwok or onepool's daemons; it reuses what runs.
func (l *Lab) UpNode(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	start := time.Now()
	steps := append([]step{
		{"kubernetes pki", l.ensurePKI},
		{"etcd", l.controlPlane().StartEtcd},
		{"kube-apiserver", l.controlPlane().StartAPIServer},
		{"kube-controller-manager", l.controlPlane().StartControllerManager},
	}, l.nodeSteps()...)
	if err := l.runSteps(ctx, steps); err != nil {
		return err
	}
	fmt.Fprintf(l.cfg.Log, "lab: node %s up in %s\n", RealNodeName, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// nodePackages are the host packages the node needs, with a file each installs.
var nodePackages = []struct{ pkg, file string }{
	{"runc", "/usr/sbin/runc"},
	{"containernetworking-plugins", cniBinDir + "/bridge"},
	{"containernetworking-plugins", cniBinDir + "/host-local"},
	{"containernetworking-plugins", cniBinDir + "/loopback"},
}

// EnsureNodePackages installs runc and the CNI plugins from the
// host's Debian mirror when one is missing: the node's one step that needs
// the network (run `lab node packages` before entering a network namespace).
func (l *Lab) EnsureNodePackages(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	return l.runSteps(ctx, []step{{"node packages", l.ensureNodePackages}})
}

func (l *Lab) ensureNodePackages(ctx context.Context) error {
	var missing []string
	for _, p := range nodePackages {
		if _, err := os.Stat(p.file); err != nil && !slices.Contains(missing, p.pkg) {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	logPath := filepath.Join(l.LogDir(), "host-apt.log")
	fmt.Fprintf(l.cfg.Log, "lab: installing %s from Debian (log %s)\n", strings.Join(missing, " "), logPath)
	install := append([]string{"apt-get", "install", "-y"}, missing...)
	if err := rootfs.RunLogged(ctx, 10*time.Minute, logPath, install...); err == nil {
		return nil
	}
	// A fresh machine may have no package lists yet (apt-get update exits 0
	// even when it reaches no mirror: the second install tells).
	_ = rootfs.RunLogged(ctx, 10*time.Minute, logPath, "apt-get", "update")
	if err := rootfs.RunLogged(ctx, 10*time.Minute, logPath, install...); err != nil {
		return fmt.Errorf("%w; no network? Inside a network namespace run `lab node packages` outside it first", err)
	}
	return nil
}

func (l *Lab) checkNodeTools(context.Context) error {
	for _, t := range []string{"kubelet", "pause", "kubectl", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(l.BinDir(), t)); err != nil {
			return fmt.Errorf("%s is not built: run `make node-tools`", filepath.Join(l.BinDir(), t))
		}
	}
	// A unix socket path is at most 107 bytes.
	if n := len(l.ContainerdSocket()); n > 100 {
		return fmt.Errorf("lab dir %s is too long for containerd's socket path (%d bytes): use a shorter ONEPOOL_LAB_DIR", l.cfg.Dir, n)
	}
	return nil
}

// NodeIP is the real node's InternalIP: ONEPOOL_LAB_NODE_IP, else the first
// non-loopback IPv4 address here (not the pods' bridge). The kubelet refuses
// a loopback address, and the apiserver reaches the kubelet there.
func (l *Lab) NodeIP() (string, error) {
	if ip := os.Getenv(EnvNodeIP); ip != "" {
		if net.ParseIP(ip) == nil {
			return "", fmt.Errorf("%s=%q is not an IP address", EnvNodeIP, ip)
		}
		return ip, nil
	}
	_, pods, _ := net.ParseCIDR(realPodSubnet)
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Name == l.nodeBridge() {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || pods.Contains(ipn.IP) {
				continue
			}
			return ipn.IP.String(), nil
		}
	}
	return "", fmt.Errorf("no non-loopback IPv4 address for the node: add one (in the lab's own network namespace e.g. `ip addr add 10.99.0.1/32 dev lo`) or set %s", EnvNodeIP)
}

// kubeletConfig is the node's KubeletConfiguration. Its API listens on the
// node IP, which outside a network namespace is a real interface: it takes
// only clients with a certificate of the lab CA (the apiserver presents the
// admin one), and lets those do anything (AlwaysAllow: lab only).
func (l *Lab) kubeletConfig(nodeIP string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM has cgroup v1; kubelet 1.35 refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# Our own cgroup (made by the lab), so two labs on one host never share /kubepods.
cgroupRoot: /%[1]s
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[9]s
authorization:
  mode: AlwaysAllow
podLogsDir: %[6]s
volumePluginDir: %[7]s
staticPodPath: %[8]s
clusterDomain: cluster.local
# The lab's DNS stand-in (clusterdns.go).
clusterDNS: [%[10]s]
registerNode: true
serializeImagePulls: false
# Images are imported, never pulled: never let image GC remove them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
evictionPressureTransitionPeriod: 10s
nodeStatusReportFrequency: 10s
# ConfigMap volumes follow their ConfigMap at each pod sync: every 10 s
# instead of 1 min (a topology.conf the controller wrote reaches slurmctld
# sooner).
syncFrequency: 10s
shutdownGracePeriod: 0s
`, l.nodeCgroup(), l.ContainerdSocket(), nodeIP, RealKubeletPort, RealKubeletHealthzPort,
		l.nodePath("pod-logs"), l.nodePath("kubelet", "volume-plugins"), l.nodePath("manifests"), l.pki().Path("ca.crt"), kubenet.ClusterDNSIP)
}

func (l *Lab) realKubeletDaemon(nodeIP string) daemon {
	return daemon{
		Name: realKubeletDaemon,
		Argv: []string{filepath.Join(l.BinDir(), "kubelet"),
			"--config", l.nodePath("kubelet.yaml"),
			"--kubeconfig", l.nodePath("kubelet.kubeconfig"),
			"--root-dir", l.nodePath("kubelet"),
			"--cert-dir", l.nodePath("kubelet", "pki"),
			"--hostname-override", RealNodeName,
			"--node-ip", nodeIP,
			"--node-labels", RealNodeLabel + "=true",
			"--v", "1"},
		Env: []string{"PATH=" + nodePATH, "HOME=" + l.nodePath("run"), "TMPDIR=" + l.nodePath("tmp")},
	}
}

func (l *Lab) startRealKubelet(ctx context.Context) error {
	nodeIP, err := l.NodeIP()
	if err != nil {
		return err
	}
	for _, d := range []string{"kubelet", "pod-logs", "manifests"} {
		if err := os.MkdirAll(l.nodePath(d), 0o755); err != nil {
			return err
		}
	}
	kcChanged, err := l.ensureNodeCredentials(ctx)
	if err != nil {
		return err
	}
	cfgChanged, err := rootfs.WriteIfChanged(l.nodePath("kubelet.yaml"), l.kubeletConfig(nodeIP))
	if err != nil {
		return err
	}
	if err := l.ensureNodeCgroup(); err != nil {
		return err
	}
	// A new node IP changes kubelet.yaml too (address): the kubelet restarts then.
	d := l.realKubeletDaemon(nodeIP)
	if err := l.startOwn(d, kcChanged || cfgChanged, l.stopRealKubelet); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 90*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", RealKubeletHealthzPort))
	})
}

// ensureNodeCredentials gives the kubelet a client certificate of its own
// (system:node:NAME in system:nodes) and binds it to the system:node
// ClusterRole: the lab's apiserver authorizes with RBAC only, no Node
// authorizer. It says whether the kubeconfig changed.
func (l *Lab) ensureNodeCredentials(ctx context.Context) (bool, error) {
	p := l.pki()
	user := "system:node:" + RealNodeName
	if err := p.EnsureClient("node-"+RealNodeName, user, []string{"system:nodes"}); err != nil {
		return false, err
	}
	kc, err := p.ClientKubeconfig(l.APIServerURL(), "node-"+RealNodeName)
	if err != nil {
		return false, err
	}
	changed, err := rootfs.WriteIfChanged(l.nodePath("kubelet.kubeconfig"), kc)
	if err != nil {
		return false, err
	}
	if err := os.Chmod(l.nodePath("kubelet.kubeconfig"), 0o600); err != nil {
		return false, err
	}
	cs, err := l.KubeClient()
	if err != nil {
		return false, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "onepool-lab:node:" + RealNodeName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(cctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("bind %s to system:node: %w", user, err)
	}
	return changed, nil
}

// cgroupMounts lists this host's cgroup hierarchies (v1 controllers, and the
// v2 or hybrid "unified" one).
func cgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		mp := mount.Unescape(f[4])
		if !slices.Contains(out, mp) {
			out = append(out, mp)
		}
	}
	return out, nil
}

// ensureNodeCgroup makes the kubelet's cgroupRoot in every hierarchy (the
// kubelet refuses a cgroupRoot that does not exist).
func (l *Lab) ensureNodeCgroup() error {
	ms, err := cgroupMounts()
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errors.New("no cgroup hierarchy is mounted")
	}
	for _, m := range ms {
		dir := filepath.Join(m, l.nodeCgroup())
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		// cgroup v1 cpuset: a new group has no CPUs or memory nodes until given its parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if cur, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.TrimSpace(string(cur)) == "" {
				if parent, err := os.ReadFile(filepath.Join(m, f)); err == nil {
					_ = os.WriteFile(filepath.Join(dir, f), parent, 0o644)
				}
			}
		}
	}
	return nil
}

func (l *Lab) awaitNodeReady(ctx context.Context) error {
	cs, err := l.KubeClient()
	if err != nil {
		return err
	}
	d := l.realKubeletDaemon("")
	// Nothing marks a stopped node NotReady (no kube-controller-manager):
	// only a heartbeat from the kubelet that runs now counts.
	st, err := os.Stat(l.procs.PidFile(d.Name))
	if err != nil {
		return err
	}
	started := st.ModTime().Add(-2 * time.Second).Truncate(time.Second)
	return l.procs.Await(ctx, d, 120*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.LastHeartbeatTime.Time.Before(started) {
					return fmt.Errorf("node %s: no heartbeat from the kubelet started at %s yet", RealNodeName, started.Format(time.RFC3339))
				}
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: Ready=%s: %s", RealNodeName, c.Status, c.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", RealNodeName)
	})
}

// nodeDaemons are the node's daemons for Status, when the node is on.
func (l *Lab) nodeDaemons() []daemon {
	if !RealKubeletEnabled() {
		return nil
	}
	return append([]daemon{l.containerdDaemon(), l.realKubeletDaemon(""), l.controlPlane().Scheduler()}, l.clusterNetStatus()...)
}

// NodeStatus writes a line per node daemon and returns how many are down.
func (l *Lab) NodeStatus(w io.Writer) int {
	return l.statusLines(w, []daemon{l.containerdDaemon(), l.realKubeletDaemon("")})
}
