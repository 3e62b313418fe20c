package podkubelet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	podStopGrace  = 20 * time.Second
	backoffFirst  = time.Second
	backoffMax    = 30 * time.Second
	podEnvPath    = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
	podMarkerEnv  = "ONEPOOL_LAB_KUBELET_POD" // finds a dead kubelet's leftovers
	slurmdName    = "slurmd"                  // the container the kubelet runs
	longEnoughRun = time.Minute               // a run this long resets the backoff
)

// podProc is the process of one slurmd pod. run owns it; stopCh asks it to
// end, done says it has ended (the process and its group are gone).
type podProc struct {
	k      *kubelet
	pod    string // namespace/name, for logs
	node   string
	stopCh chan struct{}
	done   chan struct{}
}

func (pp *podProc) logf(format string, a ...any) {
	pp.k.cfg.Log.Printf("pod %s on %s: %s", pp.pod, pp.node, fmt.Sprintf(format, a...))
}

// run starts the pod's command after prev (the node's previous pod) has
// ended, restarts it with backoff when it exits, and stops it on stopCh.
func (pp *podProc) run(pod *corev1.Pod, prev <-chan struct{}) {
	defer close(pp.done)
	if prev != nil {
		select {
		case <-prev:
		case <-pp.stopCh:
			return
		}
	}
	mkCmd, err := pp.k.podCommand(pod, pp.logf)
	if err != nil {
		// The pod's spec cannot change: no retry, just a loud line.
		pp.logf("ERROR, not started: %v", err)
		<-pp.stopCh
		return
	}
	backoff := backoffFirst
	for {
		started := time.Now()
		cmd, err := mkCmd() // the program may appear later (lab up installs the agent)
		pid, exited := 0, (<-chan error)(nil)
		if err == nil {
			pid, exited, err = pp.start(cmd)
		}
		if err != nil {
			pp.logf("start failed: %v", err)
		} else {
			select {
			case <-pp.stopCh:
				pp.stopGroup(pid, exited)
				return
			case err := <-exited:
				pp.logf("exited after %s: %v", time.Since(started).Round(time.Millisecond), exitText(err))
				// A container ends with its main process: nothing it left may
				// hold the node's port for the next start.
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		if time.Since(started) >= longEnoughRun {
			backoff = backoffFirst
		}
		pp.logf("restart in %s", backoff)
		select {
		case <-pp.stopCh:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// start runs cmd with its output appended to the node's kubelet log. The
// channel yields cmd.Wait's result.
func (pp *podProc) start(cmd *exec.Cmd) (int, <-chan error, error) {
	logPath := pp.k.cfg.LogFile(pp.node)
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer out.Close() // the child has its own copy
	fmt.Fprintf(out, "=== %s lab-kubelet starts pod %s: %s\n", time.Now().Format(time.RFC3339), pp.pod, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "=== start failed: %v\n", err)
		return 0, nil, err
	}
	pp.logf("started pid %d (log %s)", cmd.Process.Pid, logPath)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd.Process.Pid, exited, nil
}

// stopGroup ends the process group of a running pod process (its leader is
// pgid, started with Setpgid): SIGTERM, up to podStopGrace for the group to
// empty, then SIGKILL. It returns once the leader is reaped, or gives up 10 s
// after SIGKILL.
func (pp *podProc) stopGroup(pgid int, exited <-chan error) {
	start := time.Now()
	// Linux hands out no pid that is still a live group's id, so the group
	// signal reaches only the pod's processes, even after the leader is gone.
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(podStopGrace)
	defer grace.Stop()
	reaped := false
	for {
		select {
		case <-exited: //nolint:errcheck // the exit status is in the pod's log
			reaped, exited = true, nil
		case <-grace.C:
			pp.logf("still running %s after SIGTERM: SIGKILL", podStopGrace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if !reaped {
				select {
				case <-exited: //nolint:errcheck // the exit status is in the pod's log
				case <-time.After(10 * time.Second):
					pp.logf("ERROR: pid %d not reaped 10 s after SIGKILL", pgid)
					return
				}
			}
			pp.logf("killed")
			return
		case <-time.After(100 * time.Millisecond):
		}
		if reaped && errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			pp.logf("stopped in %s", time.Since(start).Round(time.Millisecond))
			return
		}
	}
}
