package lab

// The real node (package realnode): containerd + runc + CNI bridge from
// Debian and a real kubelet v1.35, registered as Node RealNodeName, running
// pods from onepool's own images. Off by default: ONEPOOL_LAB_REAL_KUBELET=1
// adds it to `lab up`; `lab node up` brings up only etcd, kube-apiserver and
// this node. What the lab adds around it: kube-scheduler for its pods, the
// Services its pods reach (kubenet), and its place in `up`, `down` and
// `status`.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab/images"
	"github.com/onepool/onepool/test/lab/kubenet"
	"github.com/onepool/onepool/test/lab/realnode"
	"github.com/onepool/onepool/test/lab/rootfs"
)

const (
	// EnvRealKubelet set to 1 adds the real node to `lab up` (and lets its tests run).
	EnvRealKubelet = "ONEPOOL_LAB_REAL_KUBELET"
	// EnvNodeIP overrides the node's InternalIP (default: the first
	// non-loopback IPv4 address of this network namespace).
	EnvNodeIP = "ONEPOOL_LAB_NODE_IP"
	// RealNodeName is the Node the real kubelet registers.
	RealNodeName = realnode.Name
	// PauseImage is the pod sandbox image, made by the lab from bin/pause.
	PauseImage = realnode.PauseImage
	// NodeFakeGPUDir holds the real node's fake GPUs (NodeFakeGPUs of them),
	// at the same path on the host and in the slurmd pod.
	NodeFakeGPUDir = realnode.FakeGPUDir
	NodeFakeGPUs   = realnode.FakeGPUs
	// LabStorageClass is the real node's StorageClass.
	LabStorageClass = realnode.StorageClass
)

// NodeImage is an image archive of .lab/images as the real node knows it.
type NodeImage = realnode.Image

// RealKubeletEnabled says whether ONEPOOL_LAB_REAL_KUBELET=1.
func RealKubeletEnabled() bool { return os.Getenv(EnvRealKubelet) == "1" }

// realNode is the lab's real node.
func (l *Lab) realNode() *realnode.Node {
	return &realnode.Node{
		Dir: l.path("node"), LabDir: l.cfg.Dir,
		BinDir: l.BinDir(), LogDir: l.LogDir(), RootFS: l.RootFS(), ImageDir: l.ImageDir(),
		Procs: l.procs, PKI: l.pki(), APIServerURL: l.APIServerURL(),
		IPOverride: os.Getenv(EnvNodeIP), ClusterDNS: kubenet.ClusterDNSIP,
		Client: func() (kubernetes.Interface, error) { return l.KubeClient() },
		Log:    l.cfg.Log,
	}
}

// ContainerdSocket is the lab containerd's socket (for ctr --address).
func (l *Lab) ContainerdSocket() string { return l.realNode().ContainerdSocket() }

// NodeCDIDir is where the node's containerd reads CDI specs (the slurm
// chart's dra.cdiDir: the node agents write them there).
func (l *Lab) NodeCDIDir() string { return l.realNode().CDIDir() }

// NodeKubeletDir is the real node's kubelet root (its plugins and
// plugins_registry: the slurm chart's dra.kubeletDir).
func (l *Lab) NodeKubeletDir() string { return l.realNode().KubeletDir() }

// NodeIP is the real node's InternalIP (ONEPOOL_LAB_NODE_IP, else found).
func (l *Lab) NodeIP() (string, error) { return l.realNode().IP() }

// realNodeSteps are the node's steps when ONEPOOL_LAB_REAL_KUBELET=1, else none.
func (l *Lab) realNodeSteps() []step {
	if !RealKubeletEnabled() {
		return nil
	}
	return l.nodeSteps()
}

func (l *Lab) nodeSteps() []step {
	n := l.realNode()
	return []step{
		{"node packages", n.EnsurePackages},
		{"node tools", n.CheckTools},
		{"containerd", n.StartContainerd},
		{"fake GPUs", realnode.EnsureFakeGPUs},
		{"fake driver root", l.shareNodeDriverRoot},
		{"node images", n.ImportImages},
		{"kubelet", n.StartKubelet},
		{"node ready", n.AwaitReady},
		// What the chart's pods need there: a scheduler for them, and
		// the apiserver and slurmrestd as Services.
		{"kube-scheduler", l.controlPlane().StartScheduler},
		{"cluster network", l.startClusterNet},
		{"node volumes", n.EnsureVolumes},
	}
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

// EnsureNodePackages installs runc and the CNI plugins from the
// host's Debian mirror when one is missing: the node's one step that needs
// the network (run `lab node packages` before entering a network namespace).
func (l *Lab) EnsureNodePackages(ctx context.Context) error {
	if err := l.checkRoot(); err != nil {
		return err
	}
	return l.runSteps(ctx, []step{{"node packages", l.realNode().EnsurePackages}})
}

// StopNode stops the real node: its pods first (through the apiserver,
// while the kubelet still runs), then the kubelet, the node's scheduler and
// Services, and what the node leaves (realnode.Teardown). It does nothing
// when the node never ran, and it never stops the control plane. Down calls
// it first.
func (l *Lab) StopNode(ctx context.Context) error {
	n := l.realNode()
	if !n.Exists() {
		return nil
	}
	if n.KubeletRunning() {
		if err := n.DeletePods(ctx); err != nil {
			// Not fatal: what is left is killed below.
			fmt.Fprintf(l.cfg.Log, "lab: node pods not deleted through the apiserver: %v\n", err)
		}
	}
	stopped := errors.Join(n.StopKubelet(), l.procs.Stop("kube-scheduler"), l.stopClusterNet(ctx))
	return errors.Join(stopped, n.Teardown(ctx))
}

// nodeDaemons are the node's daemons for Status, when the node is on.
func (l *Lab) nodeDaemons() []daemon {
	if !RealKubeletEnabled() {
		return nil
	}
	return append(append(l.realNode().Daemons(), l.controlPlane().Scheduler()), l.clusterNetStatus()...)
}

// NodeStatus writes a line per node daemon and returns how many are down.
func (l *Lab) NodeStatus(w io.Writer) int { return l.statusLines(w, l.realNode().Daemons()) }

// ImageNames are the targets `make images` builds, in order.
func ImageNames() []string { return images.Names() }

// BuildImages writes .lab/images/NAME.tar (OCI archive, image
// onepool/NAME:version) for each target (package images), from the
// rootfs, .lab/bin and the source tree src.
func (l *Lab) BuildImages(ctx context.Context, src, version string, targets []string) error {
	return images.Builder{RootFS: l.RootFS(), BinDir: l.BinDir(), Dir: l.ImageDir(), Src: src, Log: l.cfg.Log,
		Release: l.cfg.Slurm}.Build(ctx, version, targets)
}

// ImageDir holds the OCI archives `make images` writes: .lab/images for
// the default Slurm release, .lab/images-26.05 for another (its images
// tagged VERSION-slurm26.05).
func (l *Lab) ImageDir() string {
	if l.cfg.Slurm.Name == "" || l.cfg.Slurm.Name == rootfs.Default().Name {
		return l.path("images")
	}
	return l.path("images-" + l.cfg.Slurm.Name)
}

// NodeImages lists the archives in ImageDir and the names their images get.
func (l *Lab) NodeImages() ([]NodeImage, error) { return l.realNode().Images() }

// NodeImage returns the image whose archive is .lab/images/NAME.tar.
func (l *Lab) NodeImage(name string) (NodeImage, error) { return l.realNode().Image(name) }
