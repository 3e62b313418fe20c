package realnode

// The real node's container runtime: containerd (trixie's, from the lab
// rootfs) with runc and the CNI bridge, and ctr against it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

func (n *Node) containerdConfig() string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return `# Written by the onepool lab (test/lab/realnode) for containerd 1.7 (Debian trixie).
version = 2
root = ` + q(n.path("containerd", "root")) + `
state = ` + q(n.path("containerd", "state")) + `

[grpc]
  address = ` + q(n.ContainerdSocket()) + `

[ttrpc]
  address = ` + q(n.path("run", "containerd-ttrpc.sock")) + `

[debug]
  address = ` + q(n.path("run", "containerd-debug.sock")) + `

[plugins."io.containerd.internal.v1.opt"]
  path = ` + q(n.path("containerd", "opt")) + `

[plugins."io.containerd.grpc.v1.cri"]
  # Nothing can be pulled here: the lab imports this image itself.
  sandbox_image = ` + q(PauseImage) + `
  # Processes here lack CAP_SYS_RESOURCE: without this runc fails to write
  # /proc/self/oom_score_adj ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Pod network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Devices from DRA drivers (the node agent's CDI specs, one per claim).
  enable_cdi = true
  cdi_spec_dirs = [` + q(n.path("cdi")) + `]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # The host's runc (bookworm), not one found in PATH.
        BinaryName = "/usr/sbin/runc"
        # runc's state, not /run/containerd/runc.
        Root = ` + q(n.path("run", "runc")) + `
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ` + q(cniBinDir) + `
    conf_dir = ` + q(n.path("cni", "net.d")) + `
    max_conf_num = 1
`
}

func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "onepool-lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, n.Bridge(), podSubnet, n.path("cni", "ipam"))
}

func (n *Node) containerdDaemon() proc.Daemon {
	return proc.Daemon{
		Name: containerdName,
		Argv: []string{n.path("bin", "containerd"), "--config", n.path("containerd.toml"), "--log-level", "info"},
		// The shim is found in PATH: the 1.7 one first.
		Env: []string{"PATH=" + n.path("bin") + ":" + nodePATH, "HOME=" + n.path("run"), "TMPDIR=" + n.path("tmp")},
	}
}

// StartContainerd writes containerd's and the CNI config, links trixie's containerd
// 1.7 in, (re)starts it when they changed and waits until ctr reaches it.
func (n *Node) StartContainerd(ctx context.Context) error {
	for _, d := range []string{"run", "tmp", "cni/net.d", "cni/ipam", "containerd", "cdi"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := n.linkContainerd(); err != nil {
		return err
	}
	changed, err := rootfs.WriteIfChanged(n.path("containerd.toml"), n.containerdConfig())
	if err != nil {
		return err
	}
	cniChanged, err := rootfs.WriteIfChanged(n.path("cni", "net.d", "10-onepool-lab.conflist"), n.cniConfig())
	if err != nil {
		return err
	}
	d := n.containerdDaemon()
	if err := n.Procs.StartOwn(d, changed || cniChanged, func() error { return n.Procs.Stop(d.Name) }); err != nil {
		return err
	}
	return n.Procs.Await(ctx, d, 30*time.Second, n.Procs.OutFile(d.Name), func(ctx context.Context) error {
		_, err := n.Ctr(ctx, "version")
		return err
	})
}

// containerdBinaries are trixie's containerd 1.7 in the lab rootfs, run on
// the host (they need glibc 2.34, bookworm has 2.36).
var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// linkContainerd links the rootfs's containerd binaries into the node's bin
// directory (the daemon's PATH starts there).
func (n *Node) linkContainerd() error {
	if err := os.MkdirAll(n.path("bin"), 0o755); err != nil {
		return err
	}
	for _, b := range containerdBinaries {
		src := filepath.Join(n.RootFS, "usr", "bin", b)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("containerd 1.7 is not in the lab rootfs (%w): run `lab rootfs` where the Debian mirror is reachable", err)
		}
		dst := n.path("bin", b)
		if cur, err := os.Readlink(dst); err == nil && cur == src {
			continue
		}
		_ = os.Remove(dst)
		if err := os.Symlink(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// Ctr runs containerd's ctr against the lab's containerd, in its k8s.io
// namespace (the CRI's), with a deadline from ctx (at most 5 min).
func (n *Node) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.path("bin", "ctr"), append([]string{"--address", n.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	cmd.Env = []string{"PATH=" + nodePATH, "TMPDIR=" + n.path("tmp")}
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
