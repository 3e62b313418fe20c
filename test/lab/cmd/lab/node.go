package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/onepool/onepool/test/lab"
)

const nodeUsage = `usage: lab node COMMAND
  up         etcd, kube-apiserver and the real node (containerd + kubelet, Node ` + lab.RealNodeName + `); no Slurm, no kwok
  down       stop the real node only (pods, kubelet, containerd, shims; unmount; cgroups); ` + "`lab down`" + ` does it too
  packages   install containerd, runc and the CNI plugins from Debian if missing (needs the network: run it
             before entering a network namespace)
  images     the images the node imports from .lab/images, and the names pods use
  status     whether containerd and the kubelet run`

func runNode(ctx context.Context, l *lab.Lab, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("node needs one command\n%s", nodeUsage)
	}
	switch args[0] {
	case "up":
		if err := l.UpNode(ctx); err != nil {
			return err
		}
		fmt.Printf("\nNode %s is Ready. Pods use imagePullPolicy: Never with these images:\n", lab.RealNodeName)
		return printNodeImages(l)
	case "down":
		return l.StopNode(ctx)
	case "packages":
		return l.EnsureNodePackages(ctx)
	case "images":
		return printNodeImages(l)
	case "status":
		if n := l.NodeStatus(os.Stdout); n > 0 {
			return fmt.Errorf("%d node daemons are not running", n)
		}
		return nil
	default:
		return fmt.Errorf("unknown node command %q\n%s", args[0], nodeUsage)
	}
}

func printNodeImages(l *lab.Lab) error {
	imgs, err := l.NodeImages()
	if err != nil {
		return err
	}
	fmt.Printf("  %s (pod sandbox)\n", lab.PauseImage)
	for _, im := range imgs {
		fmt.Printf("  %s\n", strings.Join(im.Names, "  "))
	}
	fmt.Printf("KUBECONFIG=%s; kubectl: %s\n", l.Kubeconfig(), l.Kubectl())
	return nil
}
