package lab

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/proc"
)

// `make down` after a lab of 32 static nodes (bench-scheduler) stops the
// DRA drivers of all 32, though the next LAB_NODES is 4; other daemons are
// left to their own stop.
func TestStopStaticDRAStopsEveryRecordedDriver(t *testing.T) {
	dir := t.TempDir()
	l := &Lab{procs: proc.Supervisor{PidDir: dir, LogDir: dir}}
	start := func(name string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		go func() { _ = cmd.Wait() }() // reaped once stopped: no zombie
		require.NoError(t, os.WriteFile(l.procs.PidFile(name), fmt.Appendf(nil, "%d sleep\n", cmd.Process.Pid), 0o644))
		return cmd
	}
	drivers := []*exec.Cmd{start(staticDRAName("gpu-0")), start(staticDRAName("gpu-31"))}
	other := start("slurmctld")

	require.NoError(t, l.stopStaticDRA())
	for _, d := range drivers {
		assert.False(t, proc.Alive(d.Process.Pid, "sleep"), "driver pid %d still runs", d.Process.Pid)
	}
	assert.NoFileExists(t, l.procs.PidFile(staticDRAName("gpu-31")))
	assert.True(t, proc.Alive(other.Process.Pid, "sleep"), "another daemon is not the drivers' to stop")
	assert.FileExists(t, l.procs.PidFile("slurmctld"))
}
