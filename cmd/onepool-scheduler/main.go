// Command onepool-scheduler is kube-scheduler with onepool's plugin built
// in: configure a profile named onepool that enables the Onepool plugin
// (see scheduler/README.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/onepool/onepool/scheduler"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(scheduler.Name, scheduler.New))
	os.Exit(cli.Run(cmd))
}
