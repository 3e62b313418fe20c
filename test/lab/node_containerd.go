package lab

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

	"github.com/onepool/onepool/test/lab/rootfs"
)

func (l *Lab) containerdConfig() string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	return `# Written by the onepool lab (test/lab/node.go) for containerd 1.7 (Debian trixie).
version = 2
root = ` + q(l.nodePath("containerd", "root")) + `
state = ` + q(l.nodePath("containerd", "state")) + `

[grpc]
  address = ` + q(l.ContainerdSocket()) + `

[ttrpc]
  address = ` + q(l.nodePath("run", "containerd-ttrpc.sock")) + `

[debug]
  address = ` + q(l.nodePath("run", "containerd-debug.sock")) + `

[plugins."io.containerd.internal.v1.opt"]
  path = ` + q(l.nodePath("containerd", "opt")) + `

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
  cdi_spec_dirs = [` + q(l.nodePath("cdi")) + `]
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
        Root = ` + q(l.nodePath("run", "runc")) + `
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ` + q(cniBinDir) + `
    conf_dir = ` + q(l.nodePath("cni", "net.d")) + `
    max_conf_num = 1
`
}

func (l *Lab) cniConfig() string {
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
`, l.nodeBridge(), realPodSubnet, l.nodePath("cni", "ipam"))
}

func (l *Lab) containerdDaemon() daemon {
	return daemon{
		Name: containerdDaemon,
		Argv: []string{l.nodePath("bin", "containerd"), "--config", l.nodePath("containerd.toml"), "--log-level", "info"},
		// The shim is found in PATH: the 1.7 one first.
		Env: []string{"PATH=" + l.nodePath("bin") + ":" + nodePATH, "HOME=" + l.nodePath("run"), "TMPDIR=" + l.nodePath("tmp")},
	}
}

func (l *Lab) startContainerd(ctx context.Context) error {
	for _, d := range []string{"run", "tmp", "cni/net.d", "cni/ipam", "containerd", "cdi"} {
		if err := os.MkdirAll(l.nodePath(d), 0o755); err != nil {
			return err
		}
	}
	if err := l.linkContainerd(); err != nil {
		return err
	}
	changed, err := rootfs.WriteIfChanged(l.nodePath("containerd.toml"), l.containerdConfig())
	if err != nil {
		return err
	}
	cniChanged, err := rootfs.WriteIfChanged(l.nodePath("cni", "net.d", "10-onepool-lab.conflist"), l.cniConfig())
	if err != nil {
		return err
	}
	d := l.containerdDaemon()
	if err := l.startOwn(d, changed || cniChanged, func() error { return l.procs.Stop(d.Name) }); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 30*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		_, err := l.ctr(ctx, "version")
		return err
	})
}

// containerdBinaries are trixie's containerd 1.7 in the lab rootfs, run on
// the host (they need glibc 2.34, bookworm has 2.36).
var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// linkContainerd links the rootfs's containerd binaries into the node's bin
// directory (the daemon's PATH starts there).
func (l *Lab) linkContainerd() error {
	if err := os.MkdirAll(l.nodePath("bin"), 0o755); err != nil {
		return err
	}
	for _, b := range containerdBinaries {
		src := filepath.Join(l.RootFS(), "usr", "bin", b)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("containerd 1.7 is not in the lab rootfs (%w): run `lab rootfs` where the Debian mirror is reachable", err)
		}
		dst := l.nodePath("bin", b)
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

// ctr runs containerd's ctr against the lab's containerd, in its k8s.io
// namespace (the CRI's), with a deadline from ctx (at most 5 min).
func (l *Lab) ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.nodePath("bin", "ctr"), append([]string{"--address", l.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
	cmd.Env = []string{"PATH=" + nodePATH, "TMPDIR=" + l.nodePath("tmp")}
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
