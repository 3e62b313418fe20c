package lab

import (
	"fmt"
	"io"
	"path/filepath"
)

// Status writes one line per lab daemon: running with its pid, or stopped.
// It returns how many are not running.
func (l *Lab) Status(w io.Writer) int { return l.statusLines(w, l.daemons(w)) }

// statusLines writes a line per daemon: running with its pid, or stopped;
// it returns how many are stopped.
func (l *Lab) statusLines(w io.Writer, ds []daemon) int {
	down := 0
	for _, d := range ds {
		if pid := l.procs.Running(d); pid != 0 {
			fmt.Fprintf(w, "%-16s running  pid %d\n", d.Name, pid)
		} else {
			fmt.Fprintf(w, "%-16s stopped\n", d.Name)
			down++
		}
	}
	return down
}

// StoppedDaemons names the lab daemons that are not running.
func (l *Lab) StoppedDaemons() []string {
	var out []string
	for _, d := range l.daemons(io.Discard) {
		if l.procs.Running(d) == 0 {
			out = append(out, d.Name)
		}
	}
	return out
}

// daemons are every daemon of the lab (what cannot be listed is said on w).
func (l *Lab) daemons(w io.Writer) []daemon {
	ds, err := l.slurm().Daemons()
	if err != nil {
		fmt.Fprintf(w, "slurm rootfs: %v\n", err)
		ds = []daemon{l.slurm().Slurmrestd()}
	}
	ds = append(ds,
		daemon{Name: "etcd", Argv: []string{"etcd"}},
		l.controlPlane().APIServer(), // its binary is the release asked (kube-apiserver-1.36)
		l.controlPlane().ControllerManager(),
		daemon{Name: "kwok", Argv: []string{"kwok"}},
		l.kubeletDaemon(), l.schedulerService())
	if !ChartMode() { // the chart's pods otherwise
		ds = append(ds, l.controllerManager(), l.scheduler(0))
	}
	for _, n := range l.NodeNames() {
		ds = append(ds, l.staticDRADaemon(n))
	}
	return append(ds, l.nodeDaemons()...)
}

// Env returns shell lines that point kubectl, Slurm tools and onepool at the lab.
func (l *Lab) Env() string {
	return fmt.Sprintf("export KUBECONFIG=%s\nexport ONEPOOL_SLURMREST_URL=%s\nexport ONEPOOL_SLURMREST_TOKEN_FILE=%s\nexport PATH=%s:$PATH\n",
		l.Kubeconfig(), l.RESTURL(), l.TokenFile(), l.BinDir())
}

// Usage is printed after `up`: how to reach what runs.
func (l *Lab) Usage() string {
	lab := filepath.Join(l.BinDir(), "lab")
	return fmt.Sprintf(`
The onepool lab is up. Slurm and Kubernetes show the same GPU nodes:

  eval "$(%[1]s env)"      # KUBECONFIG, slurmrestd URL + token file, lab tools on PATH
  kubectl get nodes                # the lab's kubectl (%[2]s)
  %[1]s slurm-exec sinfo -N  # any Slurm command, run inside the Slurm chroot
  curl -H "X-SLURM-USER-TOKEN: $(cat %[3]s)" %[4]s/slurm/%[5]s/nodes/

Logs: %[6]s    Stop: make down
`, lab, l.Kubectl(), l.TokenFile(), l.RESTURL(), l.cfg.Slurm.API(), l.LogDir())
}
