package proc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func supervisor(t *testing.T) Supervisor {
	dir := t.TempDir()
	return Supervisor{PidDir: filepath.Join(dir, "pids"), LogDir: filepath.Join(dir, "logs")}
}

func sleeper(name string, args ...string) Daemon {
	return Daemon{Name: name, Argv: append([]string{"/bin/sleep"}, args...)}
}

func TestStartFindsStopsADaemon(t *testing.T) {
	s := supervisor(t)
	d := sleeper("nap", "60")
	pid, err := s.Start(d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(d.Name) })

	assert.Equal(t, pid, s.Running(d), "the pid file names the live process")
	again, err := s.Start(d)
	require.NoError(t, err)
	assert.Equal(t, pid, again, "a running daemon is not started twice")
	assert.True(t, s.RunsArgv(d))
	assert.False(t, s.RunsArgv(sleeper("nap", "61")), "a changed command line is seen")

	require.NoError(t, s.Stop(d.Name))
	assert.Zero(t, s.Running(d))
	assert.False(t, Alive(pid, "sleep"))
	assert.NoFileExists(t, s.PidFile(d.Name))
	assert.NoError(t, s.Stop(d.Name), "stopping what is stopped already is no error")

	out, err := os.ReadFile(s.OutFile(d.Name))
	require.NoError(t, err)
	assert.Contains(t, string(out), "start: /bin/sleep 60")
}

// A daemon started through a wrapper that execs it (Program) is found and
// stopped as the program it becomes; a wrapper that fails is not running.
func TestStartThroughAWrapper(t *testing.T) {
	s := supervisor(t)
	d := Daemon{Name: "wrapped", Argv: []string{"/bin/sh", "-c", `exec "$@"`, "sh", "/bin/sleep", "60"}, Program: "sleep"}
	pid, err := s.Start(d)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(d.Name) })
	assert.Equal(t, pid, s.Running(d), "found as the program it execs")
	assert.True(t, Alive(pid, "sleep"))
	require.NoError(t, s.Stop(d.Name))
	assert.False(t, Alive(pid, "sleep"))

	failed := Daemon{Name: "failed", Argv: []string{"/bin/sh", "-c", "exit 1"}, Program: "sleep"}
	_, err = s.Start(failed)
	require.NoError(t, err)
	assert.Zero(t, s.Running(failed), "a wrapper that never execs the program is not it")
}

func TestKillIsACrash(t *testing.T) {
	s := supervisor(t)
	d := sleeper("crash", "60")
	pid, err := s.Start(d)
	require.NoError(t, err)
	require.NoError(t, s.Kill(d.Name))
	assert.False(t, Alive(pid, "sleep"))
	assert.ErrorContains(t, s.Kill(d.Name), "crash is not running")
}

func TestRunningIgnoresARecycledPid(t *testing.T) {
	s := supervisor(t)
	require.NoError(t, os.MkdirAll(s.PidDir, 0o755))
	// This test's own pid runs a program other than sleep.
	require.NoError(t, os.WriteFile(s.PidFile("nap"), []byte(strings.Join([]string{strconv.Itoa(os.Getpid()), "sleep"}, " ")), 0o644))
	assert.Zero(t, s.Running(sleeper("nap", "60")))
	require.NoError(t, os.WriteFile(s.PidFile("nap"), []byte("garbage"), 0o644))
	assert.Zero(t, s.Running(sleeper("nap", "60")))
}

func TestAwaitFailsAtOnceWhenTheDaemonExits(t *testing.T) {
	s := supervisor(t)
	d := Daemon{Name: "dies", Argv: []string{"/bin/sh", "-c", "echo cannot bind; exit 3"}}
	_, err := s.Start(d)
	require.NoError(t, err)
	start := time.Now()
	err = s.Await(context.Background(), d, time.Minute, "", func(context.Context) error { return assert.AnError })
	require.Error(t, err)
	assert.Less(t, time.Since(start), 30*time.Second, "not the whole timeout")
	assert.Contains(t, err.Error(), "dies exited")
	assert.Contains(t, err.Error(), "cannot bind", "the end of its output is in the error")
}

func TestWaitForNamesTheLastFailure(t *testing.T) {
	err := WaitFor(context.Background(), "thing", 300*time.Millisecond, "", func(context.Context) error { return assert.AnError })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "thing not ready after 300ms")
	assert.Contains(t, err.Error(), assert.AnError.Error())
	n := 0
	require.NoError(t, WaitFor(context.Background(), "thing", time.Minute, "", func(context.Context) error {
		if n++; n < 3 {
			return assert.AnError
		}
		return nil
	}))
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.out")
	assert.Equal(t, "\n(log: "+path+")", LogTail(path, 3), "a missing log is named")
	var lines []string
	for i := range 20 {
		lines = append(lines, "line "+strconv.Itoa(i))
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	assert.Equal(t, "\nlast 3 lines of "+path+":\n    line 17\n    line 18\n    line 19", LogTail(path, 3))
	assert.Empty(t, LogTail("", 3))
}

func TestPortFree(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	assert.ErrorContains(t, PortFree(port), "is taken by another process")
	require.NoError(t, ln.Close())
	assert.NoError(t, PortFree(port))
}
