package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
)

// The lab's QOS as slurm.conf and sacctmgr set them (test/lab/slurmcluster/accounting.go).
const (
	qosGrace = 30 * time.Second // GraceTime of QOS normal and low
	killWait = 30 * time.Second // KillWait in slurm.conf
	// slurmctld ends a preempted job once GraceTime has passed, at its next
	// time-limit sweep, which runs every 30 s.
	timeLimitSweep = 30 * time.Second
)

// probeScript is a batch script that logs every signal it gets, with the
// time, to logPath inside the chroot, and an "alive" line every second
// until it is killed.
func probeScript(logPath string) string {
	return fmt.Sprintf(`#!/bin/sh
f=%s
now() { date +%%s.%%N; }
echo "start $(now) $SLURM_JOB_ID $SLURM_JOB_QOS $CUDA_VISIBLE_DEVICES" >> $f
for s in TERM INT HUP USR1 USR2 CONT; do trap "echo \"$s \$(now)\" >> $f" $s; done
while :; do echo "alive $(now)" >> $f; sleep 1 & wait $!; done
`, logPath)
}

type probeEvent struct {
	what string // start, alive, or a signal name
	at   time.Time
}

// readProbe parses a probe log in the chroot. A line cut by a signal that
// came while it was written has no time and is left out.
func readProbe(t *testing.T, l *lab.Lab, path string) []probeEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.RootFS(), path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("probe log: %v", err)
	}
	var evs []probeEvent
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		secs, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		evs = append(evs, probeEvent{what: f[0], at: time.Unix(0, int64(secs*1e9))})
	}
	return evs
}

func firstEvent(evs []probeEvent, what string, after time.Time) (time.Time, bool) {
	for _, e := range evs {
		if e.what == what && !e.at.Before(after) {
			return e.at, true
		}
	}
	return time.Time{}, false
}

func lastEvent(evs []probeEvent, what string) time.Time {
	var last time.Time
	for _, e := range evs {
		if e.what == what {
			last = e.at
		}
	}
	return last
}

// sbatch submits a batch job as root inside the chroot and returns its id.
func sbatch(l *lab.Lab, args ...string) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := l.Slurm(ctx, append([]string{"sbatch", "--parsable"}, args...)...)
	if err != nil {
		return 0, err
	}
	idText, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	id, err := strconv.ParseUint(idText, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("sbatch printed %q: %w", out, err)
	}
	return uint32(id), nil
}

func mustSbatch(t *testing.T, l *lab.Lab, args ...string) uint32 {
	t.Helper()
	id, err := sbatch(l, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		_, _ = l.Slurm(ctx, "scancel", strconv.FormatUint(uint64(id), 10))
	})
	return id
}

// sacctState is the job's state in the accounting database, as `sacct -X` shows it.
func sacctState(t *testing.T, l *lab.Lab, id uint32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := l.Slurm(ctx, "sacct", "-n", "-P", "-X", "-j", strconv.FormatUint(uint64(id), 10), "-o", "State")
	if err != nil {
		t.Fatalf("sacct: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func waitJobRunningOn(t *testing.T, l *lab.Lab, id uint32, node string, timeout time.Duration) time.Time {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("job %d RUNNING on %s", id, node), func() (bool, string) {
		j := scontrolJob(t, l, id)
		return j["JobState"] == "RUNNING" && j["NodeList"] == node, j["JobState"] + " " + j["Reason"] + " " + j["NodeList"]
	})
	return time.Now()
}

// A job of QOS high that needs the GPUs of a node that a QOS normal job
// holds gets them: the normal job is preempted (cancelled, PreemptMode
// CANCEL) after the normal QOS's GraceTime. Two normal jobs, on two nodes at
// once: one that asks for no warning signal, one that asks for SIGTERM to its
// batch shell (sbatch --signal=B:TERM@10, with PreemptParameters=send_user_signal).
func TestQOSPreemption(t *testing.T) {
	l := lab.Shared(t)
	if len(l.NodeNames()) < 2 {
		t.Skip("needs two GPU nodes")
	}
	for i, tc := range []struct {
		name   string
		signal []string
	}{
		{"no warning signal", nil},
		{"warning signal to the batch shell", []string{"--signal=B:TERM@10"}},
	} {
		node := l.NodeNames()[i]
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPreemption(t, l, node, tc.signal)
		})
	}
}

func testPreemption(t *testing.T, l *lab.Lab, node string, signal []string) {
	name := uniqueName("e2e-qos")
	script, logPath := "/tmp/"+name+".sh", "/tmp/"+name+".log"
	if err := os.WriteFile(filepath.Join(l.RootFS(), script), []byte(probeScript(logPath)), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(filepath.Join(l.RootFS(), script))
		os.Remove(filepath.Join(l.RootFS(), logPath))
	})
	gres := fmt.Sprintf("--gres=gpu:%d", lab.GPUsPerNode)
	args := append([]string{"--qos=" + lab.QOSNormal, "-p", lab.Partition, "-w", node, gres, "-J", name, "-o", "/dev/null"}, signal...)
	low := mustSbatch(t, l, append(args, script)...)
	waitJobRunningOn(t, l, low, node, 90*time.Second)
	eventually(t, 20*time.Second, "probe started", func() (bool, string) {
		_, ok := firstEvent(readProbe(t, l, logPath), "start", time.Time{})
		return ok, "no start line"
	})
	if j := scontrolJob(t, l, low); j["QOS"] != lab.QOSNormal || j["Account"] != lab.Account {
		t.Fatalf("normal job: QOS=%s Account=%s", j["QOS"], j["Account"])
	}

	submitted := time.Now()
	high := mustSbatch(t, l, "--qos="+lab.QOSHigh, "-p", lab.Partition, "-w", node, gres, "-J", name+"-high", "-o", "/dev/null",
		"--wrap", "sleep 600")
	bound := qosGrace + timeLimitSweep + killWait + 30*time.Second
	ran := waitJobRunningOn(t, l, high, node, bound)
	delay := ran.Sub(submitted)

	sc := scontrolJob(t, l, low)
	if sc["JobState"] != "PREEMPTED" {
		t.Errorf("preempted job: scontrol JobState=%s Reason=%s, want PREEMPTED", sc["JobState"], sc["Reason"])
	}
	eventually(t, 30*time.Second, "sacct shows PREEMPTED", func() (bool, string) {
		st := sacctState(t, l, low)
		return st == "PREEMPTED", st
	})

	evs := readProbe(t, l, logPath)
	var sigs []string
	for _, e := range evs {
		if e.what != "alive" && e.what != "start" {
			sigs = append(sigs, fmt.Sprintf("%s at +%.1fs", e.what, e.at.Sub(submitted).Seconds()))
		}
	}
	killedAt := lastEvent(evs, "alive")
	t.Logf("node %s: high job %d ran %.1fs after its submission; preempted job %d: scontrol JobState=%s Reason=%s ExitCode=%s PreemptTime=%s; "+
		"its batch shell got %v and was last alive at +%.1fs (SIGKILL)",
		node, high, delay.Seconds(), low, sc["JobState"], sc["Reason"], sc["ExitCode"], sc["PreemptTime"], sigs, killedAt.Sub(submitted).Seconds())

	// The cancel after GraceTime: SIGCONT and SIGTERM (the SIGCONT line is
	// often cut by the SIGTERM that follows at once, so it is not asserted),
	// then SIGKILL KillWait later.
	const slack = 3 * time.Second
	term, ok := firstEvent(evs, "TERM", submitted.Add(qosGrace-slack))
	if !ok {
		t.Fatalf("the preempted batch shell got no SIGTERM once GraceTime had passed; signals: %v", sigs)
	}
	if d := term.Sub(submitted); d > qosGrace+timeLimitSweep+2*slack {
		t.Errorf("SIGTERM of the cancel came %s after the high job's submission, want at most GraceTime + one time-limit sweep", d)
	}
	if d := killedAt.Sub(term); d < killWait-slack || d > killWait+slack {
		t.Errorf("the batch shell lived %s after SIGTERM, want KillWait (%s) before SIGKILL", d, killWait)
	}
	if delay < qosGrace {
		t.Errorf("high job ran %s after submission, before the normal QOS's GraceTime (%s) ran out", delay, qosGrace)
	}
	early, gotEarly := firstEvent(evs, "TERM", submitted)
	gotEarly = gotEarly && early.Before(submitted.Add(qosGrace-slack))
	if signal == nil && gotEarly {
		t.Errorf("batch shell without --signal got SIGTERM %s after the high job's submission, inside GraceTime", early.Sub(submitted))
	}
	if signal != nil && (!gotEarly || early.Sub(submitted) > 10*time.Second) {
		t.Errorf("batch shell with --signal=B:TERM got no SIGTERM within 10 s of being picked for preemption; signals: %v", sigs)
	}
}

// A submit with a QOS that does not exist fails at once, saying so.
func TestUnknownQOSRejected(t *testing.T) {
	l := lab.Shared(t)
	id, err := sbatch(l, "--qos=no-such-qos", "-p", lab.Partition, "-o", "/dev/null", "--wrap", "true")
	if err == nil {
		t.Fatalf("sbatch --qos=no-such-qos was accepted as job %d", id)
	}
	if !strings.Contains(err.Error(), "Invalid qos specification") {
		t.Errorf("sbatch --qos=no-such-qos: %v, want \"Invalid qos specification\"", err)
	}
}

// Jobs that name no QOS run in QOS normal under account onepool: through
// slurmrestd (as the token's user slurm) and with sbatch (as root).
func TestDefaultQOS(t *testing.T) {
	l := lab.Shared(t)
	c := slurmClient(t, l)
	ctx := context.Background()
	rest, err := c.SubmitJob(ctx, sleepJob(uniqueName("e2e-defqos"), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CancelJob(context.Background(), rest) })
	cli := mustSbatch(t, l, "-p", lab.Partition, "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 600")
	for _, j := range []struct {
		id   uint32
		user string
	}{{rest, "slurm"}, {cli, "root"}} {
		eventually(t, 60*time.Second, fmt.Sprintf("job %d RUNNING", j.id), func() (bool, string) {
			sc := scontrolJob(t, l, j.id)
			return sc["JobState"] == "RUNNING", sc["JobState"] + " " + sc["Reason"]
		})
		sc := scontrolJob(t, l, j.id)
		if sc["QOS"] != lab.QOSNormal || sc["Account"] != lab.Account || !strings.HasPrefix(sc["UserId"], j.user+"(") {
			t.Errorf("job %d: QOS=%s Account=%s UserId=%s, want %s %s %s", j.id, sc["QOS"], sc["Account"], sc["UserId"], lab.QOSNormal, lab.Account, j.user)
		}
	}
}
