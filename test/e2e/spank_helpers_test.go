package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/mount"
)

// jailPluginSO is the plugin `make e2e` builds for this lab (make lab-spank).
func jailPluginSO(t *testing.T, l *lab.Lab) string {
	t.Helper()
	so := l.JailPluginBuild()
	if _, err := os.Stat(so); err != nil {
		t.Fatalf("%v: build it with `make lab-spank` (make e2e does)", err)
	}
	return so
}

// withJailPlugin turns the jail plugin on with args for the rest of the test.
func withJailPlugin(t *testing.T, l *lab.Lab, args ...string) {
	t.Helper()
	if err := l.InstallJailPlugin(jailPluginSO(t, l), args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.RemoveJailPlugin(); err != nil {
			t.Errorf("turn the jail plugin off: %v", err)
		}
	})
}

// slurmAs runs a Slurm command in the lab chroot; user "" is root. The error
// carries the command's stderr.
func slurmAs(l *lab.Lab, user string, timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if user != "" {
		argv = append([]string{"runuser", "-u", user, "--"}, argv...)
	}
	out, err := l.Slurm(ctx, argv...)
	return string(out), err
}

// jobDone waits for a batch job to leave the queue and returns its state
// in the accounting database (sacctState).
func jobDone(t *testing.T, l *lab.Lab, id string) string {
	t.Helper()
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		t.Fatalf("job id %q: %v", id, err)
	}
	state := ""
	eventually(t, 60*time.Second, "job "+id+" finished", func() (bool, string) {
		state = sacctState(t, l, uint32(n))
		switch {
		case state == "", strings.HasPrefix(state, "PENDING"), strings.HasPrefix(state, "RUNNING"),
			strings.HasPrefix(state, "COMPLETING"):
			return false, state
		}
		return true, state
	})
	return state
}

// mountsUnder is the set of mount points at or under dir (the lab's
// rootfs: where slurmd's steps and the jail plugin mount). Not the whole
// mount table: make test's other lane mounts and unmounts beside this one
// (a ci-fresh run saw 104 entries before the jobs and 99 after, none of
// them the jail's).
func mountsUnder(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ms, err := mount.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range ms {
		out[m] = true
	}
	return out
}

// logSince returns what was appended to path after offset.
func logSince(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < offset {
		return string(b)
	}
	return string(b[offset:])
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
