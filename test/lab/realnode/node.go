// Package realnode is the lab's real Kubernetes node: containerd + runc + the
// CNI bridge from Debian and a real kubelet v1.35 (built into .lab/bin by
// `make node-tools`), registered as Node Name. It runs pods from onepool's
// own images (.lab/images, `make images`), imported into containerd:
// nothing is pulled from any registry. See its README.
//
// Everything it makes lives under Dir (containerd's root, state and
// socket, the kubelet's root dir, CNI config and IPAM state, pod logs), plus
// a cgroup /onepool-lab-<id> in each hierarchy and a bridge oplab<id>; Stop
// and Teardown remove pods, daemons, shims, mounts and cgroups again.
package realnode

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
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/pki"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

const (
	// Name is the Node the real kubelet registers.
	Name = "lab-node"
	// Label marks that Node (not the kwok Nodes' label: the lab deletes
	// lab-labelled Nodes it does not know).
	Label = "lab.onepool.dev/real-kubelet"
	// PauseImage is the pod sandbox image, made by the lab from bin/pause.
	PauseImage = "localhost/onepool-lab/pause:3.10"
	// KubeletPort serves logs/exec on the node IP; the healthz port is on 127.0.0.1.
	KubeletPort        = 26250
	KubeletHealthzPort = 26248
	podSubnet          = "10.89.0.0/24"
	containerdName     = "node-containerd"
	kubeletName        = "node-kubelet"
	// cniBinDir is where Debian's containernetworking-plugins installs them.
	cniBinDir = "/usr/lib/cni"
	nodePATH  = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Node is the real node of one lab.
type Node struct {
	// Dir holds everything the node makes; LabDir is the lab's own dir,
	// whose hash names the node's host-wide cgroup and bridge.
	Dir, LabDir string
	// BinDir has kubelet, pause and kubectl; LogDir the daemons' output;
	// RootFS containerd 1.7's binaries (trixie's); ImageDir the OCI
	// archives the node imports.
	BinDir, LogDir, RootFS, ImageDir string
	// Procs runs the daemons.
	Procs proc.Supervisor
	// PKI is the lab's certificate authority, APIServerURL the apiserver's URL.
	PKI          pki.PKI
	APIServerURL string
	// IPOverride is the node's InternalIP when set; else IP finds one.
	IPOverride string
	// ClusterDNS is the pods' DNS server.
	ClusterDNS string
	// Client is an admin clientset of the lab's apiserver.
	Client func() (kubernetes.Interface, error)
	// Log gets a line for what takes long or is left behind.
	Log io.Writer
}

func (n *Node) path(elem ...string) string { return filepath.Join(append([]string{n.Dir}, elem...)...) }

// ContainerdSocket is the node containerd's socket (for ctr --address).
func (n *Node) ContainerdSocket() string { return n.path("run", "containerd.sock") }

// CDIDir is where the node's containerd reads CDI specs (the slurm
// chart's dra.cdiDir: the node agents write them there).
func (n *Node) CDIDir() string { return n.path("cdi") }

// KubeletDir is the kubelet's root dir (DRA drivers register under it).
func (n *Node) KubeletDir() string { return n.path("kubelet") }

// ID tells this lab's host-wide names (cgroup, bridge) from another lab's.
func (n *Node) ID() string {
	sum := sha256.Sum256([]byte(n.LabDir))
	return hex.EncodeToString(sum[:4])
}

func (n *Node) Cgroup() string { return "onepool-lab-" + n.ID() }
func (n *Node) Bridge() string { return "oplab" + n.ID() }

// FakeGPUDir holds the real node's fake GPUs: character devices with
// NVIDIA's major 195 and minors 0..FakeGPUs-1, which no driver serves.
// It is the same path on the host and in the slurmd pod
// (charts/slurm/ci/lab-values.yaml mounts it and lists the GPUs), so the
// node agent's CDI specs name devices the runtime finds on the host. The
// chroot nodes' fakes are inside the rootfs, at the same path.
const (
	FakeGPUDir = "/var/lib/fakegpu"
	FakeGPUs   = 4
)

// EnsureFakeGPUs makes the real node's fake GPU device nodes.
func EnsureFakeGPUs(context.Context) error {
	if err := os.MkdirAll(FakeGPUDir, 0o755); err != nil {
		return err
	}
	for i := range FakeGPUs {
		if err := rootfs.MknodChar(filepath.Join(FakeGPUDir, "nvidia"+strconv.Itoa(i)), 195, uint32(i), 0o666); err != nil {
			return err
		}
	}
	return nil
}

// nodePackages are the host packages the node needs, with a file each installs.
var nodePackages = []struct{ pkg, file string }{
	{"runc", "/usr/sbin/runc"},
	{"containernetworking-plugins", cniBinDir + "/bridge"},
	{"containernetworking-plugins", cniBinDir + "/host-local"},
	{"containernetworking-plugins", cniBinDir + "/loopback"},
}

// EnsurePackages installs runc and the CNI plugins from the host's Debian
// mirror when one is missing: the node's one step that needs the network
// (run `lab node packages` before entering a network namespace).
func (n *Node) EnsurePackages(ctx context.Context) error {
	var missing []string
	for _, p := range nodePackages {
		if _, err := os.Stat(p.file); err != nil && !slices.Contains(missing, p.pkg) {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	logPath := filepath.Join(n.LogDir, "host-apt.log")
	fmt.Fprintf(n.Log, "lab: installing %s from Debian (log %s)\n", strings.Join(missing, " "), logPath)
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

// CheckTools says what `make node-tools` has not built.
func (n *Node) CheckTools(context.Context) error {
	for _, t := range []string{"kubelet", "pause", "kubectl", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(n.BinDir, t)); err != nil {
			return fmt.Errorf("%s is not built: run `make node-tools`", filepath.Join(n.BinDir, t))
		}
	}
	// A unix socket path is at most 107 bytes.
	if l := len(n.ContainerdSocket()); l > 100 {
		return fmt.Errorf("lab dir %s is too long for containerd's socket path (%d bytes): use a shorter ONEPOOL_LAB_DIR", n.LabDir, l)
	}
	return nil
}

// IP is the real node's InternalIP: ONEPOOL_LAB_NODE_IP, else the first
// non-loopback IPv4 address here (not the pods' bridge). The kubelet refuses
// a loopback address, and the apiserver reaches the kubelet there.
func (n *Node) IP() (string, error) {
	if ip := n.IPOverride; ip != "" {
		if net.ParseIP(ip) == nil {
			return "", fmt.Errorf("node IP %q is not an IP address", ip)
		}
		return ip, nil
	}
	_, pods, _ := net.ParseCIDR(podSubnet)
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Name == n.Bridge() {
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
	return "", fmt.Errorf("no non-loopback IPv4 address for the node: add one (in the lab's own network namespace e.g. `ip addr add 10.99.0.1/32 dev lo`) or set ONEPOOL_LAB_NODE_IP")
}

// kubeletConfig is the node's KubeletConfiguration. Its API listens on the
// node IP, which outside a network namespace is a real interface: it takes
// only clients with a certificate of the lab CA (the apiserver presents the
// admin one), and lets those do anything (AlwaysAllow: lab only).
func (n *Node) kubeletConfig(nodeIP string) string {
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
# The lab's DNS stand-in (package kubenet).
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
`, n.Cgroup(), n.ContainerdSocket(), nodeIP, KubeletPort, KubeletHealthzPort,
		n.path("pod-logs"), n.path("kubelet", "volume-plugins"), n.path("manifests"), n.PKI.Path("ca.crt"), n.ClusterDNS)
}

func (n *Node) kubeletDaemon(nodeIP string) proc.Daemon {
	return proc.Daemon{
		Name: kubeletName,
		Argv: []string{filepath.Join(n.BinDir, "kubelet"),
			"--config", n.path("kubelet.yaml"),
			"--kubeconfig", n.path("kubelet.kubeconfig"),
			"--root-dir", n.path("kubelet"),
			"--cert-dir", n.path("kubelet", "pki"),
			"--hostname-override", Name,
			"--node-ip", nodeIP,
			"--node-labels", Label + "=true",
			"--v", "1"},
		Env: []string{"PATH=" + nodePATH, "HOME=" + n.path("run"), "TMPDIR=" + n.path("tmp")},
	}
}

// StartKubelet writes the kubelet's config and credentials and its cgroup,
// (re)starts it when they changed or it was rebuilt, and waits for its healthz.
func (n *Node) StartKubelet(ctx context.Context) error {
	nodeIP, err := n.IP()
	if err != nil {
		return err
	}
	for _, d := range []string{"kubelet", "pod-logs", "manifests"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	kcChanged, err := n.ensureCredentials(ctx)
	if err != nil {
		return err
	}
	cfgChanged, err := rootfs.WriteIfChanged(n.path("kubelet.yaml"), n.kubeletConfig(nodeIP))
	if err != nil {
		return err
	}
	if err := n.ensureCgroup(); err != nil {
		return err
	}
	// A new node IP changes kubelet.yaml too (address): the kubelet restarts then.
	d := n.kubeletDaemon(nodeIP)
	if err := n.Procs.StartOwn(d, kcChanged || cfgChanged, n.StopKubelet); err != nil {
		return err
	}
	return n.Procs.Await(ctx, d, 90*time.Second, n.Procs.OutFile(d.Name), func(ctx context.Context) error {
		return controlplane.HTTPOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", KubeletHealthzPort))
	})
}

// ensureCredentials gives the kubelet a client certificate of its own
// (system:node:NAME in system:nodes) and binds it to the system:node
// ClusterRole: the lab's apiserver authorizes with RBAC only, no Node
// authorizer. It says whether the kubeconfig changed.
func (n *Node) ensureCredentials(ctx context.Context) (bool, error) {
	p := n.PKI
	user := "system:node:" + Name
	if err := p.EnsureClient("node-"+Name, user, []string{"system:nodes"}); err != nil {
		return false, err
	}
	kc, err := p.ClientKubeconfig(n.APIServerURL, "node-"+Name)
	if err != nil {
		return false, err
	}
	changed, err := rootfs.WriteIfChanged(n.path("kubelet.kubeconfig"), kc)
	if err != nil {
		return false, err
	}
	if err := os.Chmod(n.path("kubelet.kubeconfig"), 0o600); err != nil {
		return false, err
	}
	cs, err := n.Client()
	if err != nil {
		return false, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "onepool-lab:node:" + Name},
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
	return parseCgroupMounts(string(b)), nil
}

// parseCgroupMounts reads the cgroup mount points of a mountinfo file.
func parseCgroupMounts(mountinfo string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
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
	return out
}

// ensureCgroup makes the kubelet's cgroupRoot in every hierarchy (the
// kubelet refuses a cgroupRoot that does not exist).
func (n *Node) ensureCgroup() error {
	ms, err := cgroupMounts()
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errors.New("no cgroup hierarchy is mounted")
	}
	for _, m := range ms {
		dir := filepath.Join(m, n.Cgroup())
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

// AwaitReady waits until the Node is Ready with a heartbeat from the
// kubelet that runs now.
func (n *Node) AwaitReady(ctx context.Context) error {
	cs, err := n.Client()
	if err != nil {
		return err
	}
	d := n.kubeletDaemon("")
	// Nothing marks a stopped node NotReady (no kube-controller-manager):
	// only a heartbeat from the kubelet that runs now counts.
	st, err := os.Stat(n.Procs.PidFile(d.Name))
	if err != nil {
		return err
	}
	started := st.ModTime().Add(-2 * time.Second).Truncate(time.Second)
	return n.Procs.Await(ctx, d, 120*time.Second, n.Procs.OutFile(d.Name), func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.LastHeartbeatTime.Time.Before(started) {
					return fmt.Errorf("node %s: no heartbeat from the kubelet started at %s yet", Name, started.Format(time.RFC3339))
				}
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: Ready=%s: %s", Name, c.Status, c.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", Name)
	})
}

// Daemons are the node's own daemons: containerd and the kubelet.
func (n *Node) Daemons() []proc.Daemon {
	return []proc.Daemon{n.containerdDaemon(), n.kubeletDaemon("")}
}
