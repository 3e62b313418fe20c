package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is one long-running lab process.
type daemon struct {
	name   string   // pid file and log file name
	argv   []string // argv[0] is an absolute path (inside the chroot when chroot is set)
	env    []string
	chroot string
	port   int // when set, the port must be free before the start
	uid    uint32
	gid    uint32
}

func (l *Lab) pidFile(name string) string { return l.path("run", "pids", name+".pid") }

// running returns the pid of a live daemon started by the lab, or 0.
func (l *Lab) running(d daemon) int {
	pid, prog := l.readPid(d.name)
	if pid == 0 || prog != filepath.Base(d.argv[0]) || !alive(pid, prog) {
		return 0
	}
	return pid
}

// readPid reads a pid file: "<pid> <program>".
func (l *Lab) readPid(name string) (int, string) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, ""
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, ""
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, ""
	}
	return pid, f[1]
}

// alive says whether pid runs a program called prog (not a zombie, not a
// recycled pid that now runs something else).
func alive(pid int, prog string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open || closing+2 >= len(s) {
		return false
	}
	comm, state := s[open+1:closing], s[closing+2]
	if state == 'Z' || state == 'X' {
		return false
	}
	// comm is cut to 15 bytes by the kernel.
	if len(prog) > 15 {
		prog = prog[:15]
	}
	return comm == prog
}

// start launches d unless it already runs. Its output goes to the log folder,
// its stdin is /dev/null and it gets its own session, so it outlives the
// caller and holds none of the caller's pipes.
func (l *Lab) start(d daemon) (int, error) {
	if pid := l.running(d); pid != 0 {
		return pid, nil
	}
	if d.port != 0 {
		if err := portFree(d.port); err != nil {
			return 0, fmt.Errorf("%s: %w", d.name, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(l.pidFile(d.name)), 0o755); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(l.LogDir(), 0o755); err != nil {
		return 0, err
	}
	logPath := filepath.Join(l.LogDir(), d.name+".out")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s start: %s\n", time.Now().Format(time.RFC3339), strings.Join(d.argv, " "))
	cmd := exec.Command(d.argv[0], d.argv[1:]...)
	cmd.Env = d.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if d.chroot != "" {
		// exec.Command resolves argv[0] on the host; inside the chroot the path is what counts.
		cmd.Path = d.argv[0]
		cmd.SysProcAttr.Chroot = d.chroot
		cmd.Dir = "/"
	}
	if d.uid != 0 || d.gid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: d.uid, Gid: d.gid}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s (log %s): %w", d.name, logPath, err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() //nolint:errcheck // reaps the child if it dies while we still run
	if err := os.WriteFile(l.pidFile(d.name), []byte(fmt.Sprintf("%d %s\n", pid, filepath.Base(d.argv[0]))), 0o644); err != nil {
		return 0, err
	}
	return pid, nil
}

// runsArgv says whether d's running process was started with d.argv (true
// when its command line cannot be read).
func (l *Lab) runsArgv(d daemon) bool {
	pid := l.running(d)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return pid == 0 || err != nil || string(cmdline) == strings.Join(d.argv, "\x00")+"\x00"
}

// KillDaemon kills a running lab daemon by its name ("slurmctld",
// "kube-apiserver", "slurmd-gpu-0", ...) with SIGKILL, as a crash would,
// waits until it is gone and forgets its pid; lab up starts it again.
func (l *Lab) KillDaemon(name string) error {
	pid, prog := l.readPid(name)
	if pid == 0 || !alive(pid, prog) {
		return fmt.Errorf("%s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	for i := 0; i < 100 && alive(pid, prog); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid, prog) {
		return fmt.Errorf("%s (pid %d) survives SIGKILL", name, pid)
	}
	return os.Remove(l.pidFile(name))
}

// stopDaemon stops a daemon by its pid file: SIGTERM, then SIGKILL after 20 s.
func (l *Lab) stopDaemon(name string) error {
	if _, err := os.Stat(l.pidFile(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if pid, prog := l.readPid(name); pid != 0 && alive(pid, prog) {
		if err := terminate(pid, prog, 20*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	return os.Remove(l.pidFile(name))
}

func terminate(pid int, prog string, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid, prog) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && alive(pid, prog); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid, prog) {
		return fmt.Errorf("pid %d (%s) survives SIGKILL", pid, prog)
	}
	return nil
}

// killChrooted kills every process whose root is the lab's rootfs: job steps,
// slurmstepd, and daemons whose pid file was lost.
func killChrooted(root string) error { return killChrootedIf(root, nil) }

// killChrootedIf kills the processes in root that match (all when match is
// nil): SIGTERM, up to 20 s, then SIGKILL.
func killChrootedIf(root string, match func(pid int) bool) error {
	root = filepath.Clean(root)
	kill := func(sig syscall.Signal) int {
		n := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
			if err != nil || (r != root && !strings.HasPrefix(r, root+"/")) || (match != nil && !match(pid)) {
				continue
			}
			if syscall.Kill(pid, sig) == nil {
				n++
			}
		}
		return n
	}
	if kill(syscall.SIGTERM) == 0 {
		return nil
	}
	for i := 0; i < 200; i++ { // 20 s
		time.Sleep(100 * time.Millisecond)
		if kill(0) == 0 {
			return nil
		}
	}
	kill(syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond)
	if n := kill(0); n != 0 {
		return fmt.Errorf("%d processes inside %s survive SIGKILL", n, root)
	}
	return nil
}

// chrootedPids lists the live processes called prog whose root is root.
func chrootedPids(root, prog string) []int {
	root = filepath.Clean(root)
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err == nil && r == root && alive(pid, prog) {
			out = append(out, pid)
		}
	}
	return out
}

// portFree fails with a clear message when something already listens on port.
func portFree(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("port %d is taken by another process (see `ss -ltnp 'sport = :%d'`); stop it or run `make down`", port, port)
	}
	return ln.Close()
}

// errExited is what a readiness check of awaitDaemon returns once the daemon is gone.
var errExited = errors.New("exited")

// waitFor polls check until it returns nil, the timeout passes or ctx ends;
// a check that fails with errExited ends it at once. The error names what
// was awaited and the last failure, and ends with the last lines of the log
// (logPath may be a folder: then only its name is given).
func waitFor(ctx context.Context, what string, timeout time.Duration, logPath string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		if errors.Is(last, errExited) {
			return fmt.Errorf("%s exited %s after its start%s", what, time.Since(start).Round(10*time.Millisecond), logTail(logPath, logTailLines))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v%s", what, timeout, last, logTail(logPath, logTailLines))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awaitDaemon is waitFor for a daemon the lab started: it fails at once,
// with the end of the daemon's log, when the daemon dies before it is ready.
// When logPath is not the daemon's own output file and holds nothing, the
// output file is shown instead.
func (l *Lab) awaitDaemon(ctx context.Context, d daemon, timeout time.Duration, logPath string, check func(context.Context) error) error {
	if st, err := os.Stat(logPath); err != nil || st.Size() == 0 {
		logPath = filepath.Join(l.LogDir(), d.name+".out")
	}
	return waitFor(ctx, d.name, timeout, logPath, func(ctx context.Context) error {
		if l.running(d) == 0 {
			return errExited
		}
		return check(ctx)
	})
}

const logTailLines = 12

// logTail returns "\n(log: PATH)" followed by the file's last lines,
// indented, or just the path when there is nothing to show.
func logTail(path string, lines int) string {
	if path == "" {
		return ""
	}
	ref := "\n(log: " + path + ")"
	f, err := os.Open(path)
	if err != nil {
		return ref
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.IsDir() || st.Size() == 0 {
		return ref
	}
	const window = 16 << 10
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	text := strings.TrimRight(string(buf[:n]), "\n")
	all := strings.Split(text, "\n")
	if off > 0 && len(all) > 1 {
		all = all[1:] // the first line of the window may be cut
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("\nlast %d lines of %s:\n    %s", len(all), path, strings.Join(all, "\n    "))
}
