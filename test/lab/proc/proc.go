// Package proc starts the lab's long-running processes and keeps track of
// them by pid files, so a later run (another test binary, lab down) finds
// them: each in its own session, its output appended to a log file, in a
// chroot and as a user when asked. It also waits for readiness with a
// bound and kills what runs inside a chroot.
package proc

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

// Daemon is one long-running lab process.
type Daemon struct {
	Name   string   // pid file and log file name
	Argv   []string // Argv[0] is an absolute path (inside the chroot when Chroot is set)
	Env    []string
	Chroot string
	Port   int // when set, the port must be free before the start
	UID    uint32
	GID    uint32
	// Program is the program's name once it runs, when Argv[0] is a
	// wrapper that execs it (unshare ... sh -c 'exec "$@"'); default:
	// Argv[0]'s base name.
	Program string
}

// program is the name d's process has once it runs.
func (d Daemon) program() string {
	if d.Program != "" {
		return d.Program
	}
	return filepath.Base(d.Argv[0])
}

// Supervisor keeps the pid files of the daemons it starts in PidDir
// ("<pid> <program>") and their output in LogDir (<name>.out).
type Supervisor struct {
	PidDir, LogDir string
}

// PidFile is the pid file of the daemon called name.
func (s Supervisor) PidFile(name string) string { return filepath.Join(s.PidDir, name+".pid") }

// OutFile is the file the daemon called name writes its output to.
func (s Supervisor) OutFile(name string) string { return filepath.Join(s.LogDir, name+".out") }

// Running returns the pid of a live daemon started by the supervisor, or 0.
func (s Supervisor) Running(d Daemon) int {
	pid, prog := s.ReadPid(d.Name)
	if pid == 0 || prog != d.program() || !Alive(pid, prog) {
		return 0
	}
	return pid
}

// ReadPid reads a pid file: "<pid> <program>" (0 and "" for none).
func (s Supervisor) ReadPid(name string) (int, string) {
	b, err := os.ReadFile(s.PidFile(name))
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

// Alive says whether pid runs a program called prog (not a zombie, not a
// recycled pid that now runs something else).
func Alive(pid int, prog string) bool {
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

// Start launches d unless it already runs, and returns its pid. Its output
// goes to OutFile, its stdin is /dev/null and it gets its own session, so
// it outlives the caller and holds none of the caller's pipes.
func (s Supervisor) Start(d Daemon) (int, error) {
	if pid := s.Running(d); pid != 0 {
		return pid, nil
	}
	if d.Port != 0 {
		if err := PortFree(d.Port); err != nil {
			return 0, fmt.Errorf("%s: %w", d.Name, err)
		}
	}
	if err := os.MkdirAll(s.PidDir, 0o755); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return 0, err
	}
	logPath := s.OutFile(d.Name)
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s start: %s\n", time.Now().Format(time.RFC3339), strings.Join(d.Argv, " "))
	cmd := exec.Command(d.Argv[0], d.Argv[1:]...)
	cmd.Env = d.Env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if d.Chroot != "" {
		// exec.Command resolves Argv[0] on the host; inside the chroot the path is what counts.
		cmd.Path = d.Argv[0]
		cmd.SysProcAttr.Chroot = d.Chroot
		cmd.Dir = "/"
	}
	if d.UID != 0 || d.GID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: d.UID, Gid: d.GID}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s (log %s): %w", d.Name, logPath, err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() //nolint:errcheck // reaps the child if it dies while we still run
	if d.Program != "" {
		// A wrapper execs the program in a moment; until then the process
		// is not yet d. One that never does is found gone by Running.
		for i := 0; i < 100 && !Alive(pid, d.program()); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.WriteFile(s.PidFile(d.Name), []byte(fmt.Sprintf("%d %s\n", pid, d.program())), 0o644); err != nil {
		return 0, err
	}
	return pid, nil
}

// StartOwn starts d, one of the lab's own builds (its Argv[0] a binary the
// lab made). A running one is kept unless its binary is newer than its pid
// file, it runs another command line, or configChanged: then stop (the
// daemon's own way to stop) runs first.
func (s Supervisor) StartOwn(d Daemon, configChanged bool, stop func() error) error {
	bin, err := os.Stat(d.Argv[0])
	if err != nil {
		return fmt.Errorf("%s is not built: run `make tools`", d.Argv[0])
	}
	if s.Running(d) != 0 {
		pf, err := os.Stat(s.PidFile(d.Name))
		if configChanged || !s.RunsArgv(d) || (err == nil && bin.ModTime().After(pf.ModTime())) {
			if err := stop(); err != nil {
				return err
			}
		}
	}
	_, err = s.Start(d)
	return err
}

// RunsArgv says whether d's running process was started with d.Argv (true
// when its command line cannot be read).
func (s Supervisor) RunsArgv(d Daemon) bool {
	pid := s.Running(d)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return pid == 0 || err != nil || string(cmdline) == strings.Join(d.Argv, "\x00")+"\x00"
}

// Kill kills a running daemon by its name with SIGKILL, as a crash would,
// waits until it is gone and forgets its pid.
func (s Supervisor) Kill(name string) error {
	pid, prog := s.ReadPid(name)
	if pid == 0 || !Alive(pid, prog) {
		return fmt.Errorf("%s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	for i := 0; i < 100 && Alive(pid, prog); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if Alive(pid, prog) {
		return fmt.Errorf("%s (pid %d) survives SIGKILL", name, pid)
	}
	return os.Remove(s.PidFile(name))
}

// Stop stops a daemon by its pid file: SIGTERM, then SIGKILL after 20 s.
// A daemon without a pid file is stopped already.
func (s Supervisor) Stop(name string) error {
	if _, err := os.Stat(s.PidFile(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if pid, prog := s.ReadPid(name); pid != 0 && Alive(pid, prog) {
		if err := Terminate(pid, prog, 20*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	return os.Remove(s.PidFile(name))
}

// Terminate sends pid SIGTERM, and SIGKILL when it still runs prog after
// grace; it fails when the process survives that.
func Terminate(pid int, prog string, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !Alive(pid, prog) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && Alive(pid, prog); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if Alive(pid, prog) {
		return fmt.Errorf("pid %d (%s) survives SIGKILL", pid, prog)
	}
	return nil
}

// KillChrooted kills every process whose root is root or below it (the
// lab's rootfs: job steps, slurmstepd, and daemons whose pid file was lost).
func KillChrooted(root string) error { return KillChrootedIf(root, nil) }

// KillChrootedIf kills the processes in root that match (all when match is
// nil): SIGTERM, up to 20 s, then SIGKILL.
func KillChrootedIf(root string, match func(pid int) bool) error {
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

// ChrootedPids lists the live processes called prog whose root is root.
func ChrootedPids(root, prog string) []int {
	root = filepath.Clean(root)
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err == nil && r == root && Alive(pid, prog) {
			out = append(out, pid)
		}
	}
	return out
}

// PortFree fails with a clear message when something already listens on port.
func PortFree(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("port %d is taken by another process (see `ss -ltnp 'sport = :%d'`); stop it or run `make down`", port, port)
	}
	return ln.Close()
}

// ErrExited is what a readiness check returns once what it waits for is
// gone; Await's checks return it when the daemon exits.
var ErrExited = errors.New("exited")

// WaitFor polls check until it returns nil, the timeout passes or ctx ends;
// a check that fails with ErrExited ends it at once. The error names what
// was awaited and the last failure, and ends with the last lines of the log
// (logPath may be a folder: then only its name is given).
func WaitFor(ctx context.Context, what string, timeout time.Duration, logPath string, check func(context.Context) error) error {
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
		if errors.Is(last, ErrExited) {
			return fmt.Errorf("%s exited %s after its start%s", what, time.Since(start).Round(10*time.Millisecond), LogTail(logPath, LogTailLines))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v%s", what, timeout, last, LogTail(logPath, LogTailLines))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Await is WaitFor for a daemon the supervisor started: it fails at once,
// with the end of the daemon's log, when the daemon dies before it is ready.
// When logPath is not the daemon's own output file and holds nothing, the
// output file is shown instead.
func (s Supervisor) Await(ctx context.Context, d Daemon, timeout time.Duration, logPath string, check func(context.Context) error) error {
	if st, err := os.Stat(logPath); err != nil || st.Size() == 0 {
		logPath = s.OutFile(d.Name)
	}
	return WaitFor(ctx, d.Name, timeout, logPath, func(ctx context.Context) error {
		if s.Running(d) == 0 {
			return ErrExited
		}
		return check(ctx)
	})
}

// LogTailLines is how many lines of a log a failed wait shows.
const LogTailLines = 12

// LogTail returns "\n(log: PATH)" followed by the file's last lines,
// indented, or just the path when there is nothing to show.
func LogTail(path string, lines int) string {
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
