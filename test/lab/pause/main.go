// Command pause is the lab's pod sandbox ("pause") process: it holds a pod's
// namespaces, reaps orphans when it is the pod's init, and exits on SIGINT or
// SIGTERM. The real-kubelet node builds it statically (CGO_ENABLED=0) into a
// one-file image, since nothing can be pulled from a registry in the lab.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("onepool lab pause")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
