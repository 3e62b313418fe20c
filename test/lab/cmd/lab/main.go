// Command lab brings the onepool lab up and down; see package lab.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/kubenet"
)

const usage = `usage: lab COMMAND
  up [--slurm-only]        bring the lab up (or reuse what runs)
  down                     stop every lab process and unmount the rootfs
  rootfs                   only build (or update) the Slurm chroot: the step that needs the network
  images SRC VERSION [T..] onepool's images as OCI archives in .lab/images (make images): the rootfs's
                           base layer, .lab/bin's binaries, SRC's build/slurm and spank/onepool_jail.so
                           (built for the rootfs's Slurm); on 26.05 in .lab/images-26.05, tagged VERSION-slurm26.05
  status                   which lab daemons run, and the rootfs's packages against the proven manifest
  manifest [--accept]      how the rootfs's packages differ from test/lab/rootfs/rootfs-trixie.manifest;
                           --accept records them there as proven (after a passing make test)
  env                      shell exports for KUBECONFIG, slurmrestd URL and token, PATH
  slurm-exec -- CMD ARGS   run a Slurm command inside the chroot (sinfo, scontrol, sbatch...)
  slurmd-pods [--remove]   give each static node (gpu-N) a slurmd pod in namespace onepool-lab, as a
                           NodeSet would, so that onepool acts on it (make up does); --remove takes
                           them away and resumes the drains that made
  kubelet                  the lab kubelet (a daemon of ` + "`up`" + `): runs slurmd pods of the dyn-* Nodes in the chroot
  service-proxy LISTEN B1,B2  a Service stand-in (a daemon of ` + "`up`" + `): round robin over the backends that accept;
                           a backend is host:port or endpoints:NAMESPACE/SERVICE/PORTNAME (its ready EndpointSlice addresses)
  kube-proxy               the lab's kube-proxy stand-in (a daemon of the real node): ClusterIPs on lo, forwarded to endpoints
  cluster-dns LISTEN       the lab's cluster DNS stand-in (a daemon of the real node): Service and pod names under svc.cluster.local
  node up|down|packages|images|status
                           a real kubelet + containerd node (lab-node); see node.go
Environment: ONEPOOL_LAB_DIR, ONEPOOL_LAB_NODES (4), ONEPOOL_LAB_EXTRA_NODES (0), ONEPOOL_LAB_DYN_NODES (5, at most 32),
  ONEPOOL_LAB_REAL_KUBELET=1 (up also starts the real node), ONEPOOL_LAB_NODE_IP,
  ONEPOOL_LAB_COMPONENTS=chart (with the real node: onepool's components as charts/onepool installs them, not processes)`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	cfg, err := lab.ConfigFromEnv()
	if err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd, rest := args[0], args[1:]; cmd {
	case "up":
		if len(rest) == 1 && rest[0] == "--slurm-only" {
			return l.UpSlurm(ctx)
		}
		if err := l.Up(ctx); err != nil {
			return err
		}
		fmt.Print(l.Usage())
	case "down":
		return l.Down(ctx)
	case "rootfs":
		return l.EnsureRootFS(ctx)
	case "images":
		if len(rest) < 2 {
			return fmt.Errorf("images takes SRC VERSION [TARGET...]\n%s", usage)
		}
		targets := rest[2:]
		if len(targets) == 0 {
			targets = lab.ImageNames()
		}
		return l.BuildImages(ctx, rest[0], rest[1], targets)
	case "status":
		n := l.Status(os.Stdout)
		if err := l.ManifestStatus(ctx, os.Stdout); err != nil {
			fmt.Printf("slurm rootfs     %v\n", err)
		}
		if n > 0 {
			return fmt.Errorf("%d lab daemons are not running", n)
		}
	case "manifest":
		if len(rest) == 1 && rest[0] == "--accept" {
			dst, err := l.AcceptManifest(ctx)
			if err == nil {
				fmt.Printf("lab: wrote %s (commit it; the lab binary embeds it when rebuilt)\n", dst)
			}
			return err
		}
		if len(rest) != 0 {
			return fmt.Errorf("manifest takes only --accept\n%s", usage)
		}
		return l.ManifestStatus(ctx, os.Stdout)
	case "kubelet":
		return l.RunKubelet(ctx)
	case "service-proxy":
		if len(rest) != 2 {
			return fmt.Errorf("service-proxy takes LISTEN BACKEND[,BACKEND...]\n%s", usage)
		}
		backends, err := kubenet.ParseBackends(rest[1], func() (kubernetes.Interface, error) { return l.KubeClient() })
		if err != nil {
			return err
		}
		return kubenet.ServiceProxy(ctx, rest[0], backends)
	case "kube-proxy":
		kc, err := l.KubeClient()
		if err != nil {
			return err
		}
		return kubenet.KubeProxy(ctx, kc, fmt.Sprintf("127.0.0.1:%d", lab.APIServerPort))
	case "cluster-dns":
		if len(rest) != 1 {
			return fmt.Errorf("cluster-dns takes LISTEN (ip:port)\n%s", usage)
		}
		kc, err := l.KubeClient()
		if err != nil {
			return err
		}
		return kubenet.ClusterDNS(ctx, rest[0], kc)
	case "node":
		return runNode(ctx, l, rest)
	case "env":
		fmt.Print(l.Env())
	case "slurmd-pods":
		switch {
		case len(rest) == 0:
			if err := l.StaticSlurmdPods(ctx); err != nil {
				return err
			}
			fmt.Printf("lab: slurmd pods in namespace %s for %v\n", lab.StaticSlurmdNS, l.NodeNames())
		case len(rest) == 1 && rest[0] == "--remove":
			return l.RemoveStaticSlurmdPods(ctx)
		default:
			return fmt.Errorf("slurmd-pods takes only --remove\n%s", usage)
		}
	case "slurm-exec":
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return fmt.Errorf("slurm-exec needs a command\n%s", usage)
		}
		out, err := l.Slurm(ctx, rest...)
		os.Stdout.Write(out)
		return err
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	return nil
}
