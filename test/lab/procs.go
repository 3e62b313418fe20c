package lab

import "github.com/onepool/onepool/test/lab/proc"

// daemon is one long-running lab process (package proc starts, supervises
// and stops it; the lab keeps the pid files in run/pids and the output in
// logs/<name>.out).
type daemon = proc.Daemon

// KillDaemon kills a running lab daemon by its name ("slurmctld",
// "kube-apiserver", "slurmd-gpu-0", ...) with SIGKILL, as a crash would,
// waits until it is gone and forgets its pid; lab up starts it again.
func (l *Lab) KillDaemon(name string) error { return l.procs.Kill(name) }
