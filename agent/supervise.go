package agent

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"
)

// supervise runs argv with env, passing stdout and stderr through, and
// returns its exit code (128+signal when a signal ended it, as a shell
// reports it). Every signal on signals is forwarded to the child; the end of
// ctx is forwarded as SIGTERM, so slurmd always gets to shut down cleanly.
//
// reapAll makes it reap every child, not just slurmd: as a container's PID 1
// the agent inherits slurmd's orphans (slurmstepd of finished jobs) and must
// collect them, or they stay zombies for the pod's life.
func supervise(ctx context.Context, argv, env []string, signals <-chan os.Signal, reapAll bool, logger *log.Logger) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = nil
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	logger.Printf("started %s (pid %d)", argv[0], pid)

	type exit struct {
		status syscall.WaitStatus
		err    error
	}
	done := make(chan exit, 1)
	go func() {
		// Wait4 instead of cmd.Wait: with reapAll one loop collects
		// orphans and slurmd alike, and the two must not race.
		target := pid
		if reapAll {
			target = -1
		}
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(target, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				done <- exit{err: fmt.Errorf("wait for %s: %w", argv[0], err)}
				return
			}
			if wpid == pid {
				done <- exit{status: ws}
				return
			}
		}
	}()

	ctxDone := ctx.Done()
	for {
		select {
		case sig := <-signals:
			logger.Printf("forwarding %v to %s", sig, argv[0])
			if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				logger.Printf("forward %v: %v", sig, err)
			}
		case <-ctxDone:
			ctxDone = nil // once; then wait for slurmd to go
			logger.Printf("stopping %s: %v", argv[0], context.Cause(ctx))
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				logger.Printf("stop: %v", err)
			}
		case e := <-done:
			if e.err != nil {
				return 0, e.err
			}
			_ = cmd.Process.Release() // reaped above: nothing is held
			code := exitCode(e.status)
			logger.Printf("%s exited: %s (exit code %d)", argv[0], describeStatus(e.status), code)
			return code, nil
		}
	}
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func describeStatus(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("status %d", ws.ExitStatus())
}
