package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/mount"
)

// jailCheckScript prints what a user would look at to know where the step
// runs. tok names a file that exists only in the node's /tmp and /run.
func jailCheckScript(tok string) string {
	return strings.Join([]string{
		"cat " + lab.JailMarker,
		"echo cwd=$(pwd)",
		"echo user=$(id -un)",
		"echo tmp=$(cat /tmp/" + tok + ")",
		"echo run=$(cat /run/" + tok + ")",
		"test -c /dev/null && echo dev=yes",
		"test -d /sys/kernel && echo sys=yes",
		"test -d /var/spool/slurmd/$SLURMD_NODENAME && echo spool=yes",
		"grep -q ' /proc rw,nosuid,nodev,noexec.* - proc ' /proc/self/mountinfo && echo proc=fresh",
		"test -e /usr/sbin/slurmd || echo node-root=hidden",
	}, "; ")
}

func wantJailView(t *testing.T, what, out string) {
	t.Helper()
	for _, want := range []string{
		"onepool lab jail", "cwd=/home/" + lab.JailUser, "user=" + lab.JailUser, "tmp=node-local", "run=node-local",
		"dev=yes", "sys=yes", "spool=yes", "proc=fresh", "node-root=hidden",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("%s: output lacks %q:\n%s", what, want, out)
		}
	}
}

// TestJailStepsRunInSharedRoot: with the plugin on, srun, sbatch and interactive steps of
// an ordinary user run inside the jail (its marker, its /home), see the
// node's own /tmp, /run, /dev, /sys and spool, get a fresh /proc, share the
// jail between nodes, and leave no mount behind on the node.
func TestJailStepsRunInSharedRoot(t *testing.T) {
	l := lab.Shared(t)
	nodes := l.NodeNames()[:2]
	for _, n := range nodes {
		resumeIfDrained(t, l, n)
	}
	mountsBefore := mountsUnder(t, l.RootFS())
	withJailPlugin(t, l, "root="+lab.JailRoot)

	tok := uniqueName("jail")
	for _, dir := range []string{"tmp", "run"} {
		p := filepath.Join(l.RootFS(), dir, tok)
		if err := os.WriteFile(p, []byte("node-local\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	if _, err := os.Stat(l.JailHostPath("/tmp/" + tok)); err == nil {
		t.Fatalf("the jail's own /tmp has %s: the test could not tell node-local from shared", tok)
	}

	t.Run("srun", func(t *testing.T) {
		out, err := slurmAs(l, lab.JailUser, 60*time.Second,
			"srun", "-w", nodes[0], "-D", "/home/"+lab.JailUser, "sh", "-c", jailCheckScript(tok))
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		wantJailView(t, "srun", out)
	})

	shared := "/shared/" + tok
	t.Run("sbatch", func(t *testing.T) {
		outFile := "/home/" + lab.JailUser + "/" + tok + ".out"
		out, err := slurmAs(l, lab.JailUser, 30*time.Second,
			"sbatch", "--parsable", "-w", nodes[0], "-D", "/home/"+lab.JailUser, "-o", outFile,
			"--wrap", jailCheckScript(tok)+"; echo written-on-$SLURMD_NODENAME > "+shared)
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		id := strings.TrimSpace(out)
		if state := jobDone(t, l, id); state != "COMPLETED" {
			t.Errorf("batch job %s: %s, want COMPLETED", id, state)
		}
		b, err := os.ReadFile(l.JailHostPath(outFile))
		if err != nil {
			t.Fatal(err)
		}
		wantJailView(t, "sbatch", string(b))
	})

	t.Run("shared between nodes", func(t *testing.T) {
		out, err := slurmAs(l, lab.JailUser, 60*time.Second, "srun", "-w", nodes[1], "-D", "/home/"+lab.JailUser, "cat", shared)
		if err != nil {
			t.Fatalf("srun on %s: %v", nodes[1], err)
		}
		if got, want := strings.TrimSpace(out), "written-on-"+nodes[0]; got != want {
			t.Errorf("%s on %s reads %q, want %q", shared, nodes[1], got, want)
		}
		if _, err := os.Stat(filepath.Join(l.RootFS(), shared)); err == nil {
			t.Errorf("%s exists on the node itself: the job wrote outside the jail", shared)
		}
	})

	t.Run("interactive step", func(t *testing.T) {
		// What salloc runs with LaunchParameters=use_interactive_step.
		name := uniqueName("jail-salloc")
		if _, err := slurmAs(l, lab.JailUser, 30*time.Second, "salloc", "--no-shell", "-J", name, "-w", nodes[1]); err != nil {
			t.Fatalf("salloc: %v", err)
		}
		out, err := slurmAs(l, "", 20*time.Second, "squeue", "-h", "-n", name, "-o", "%i")
		id := strings.TrimSpace(out)
		if err != nil || id == "" {
			t.Fatalf("squeue -n %s: %q %v", name, out, err)
		}
		t.Cleanup(func() {
			_, _ = slurmAs(l, "", 20*time.Second, "scancel", id)
			jobDone(t, l, id) // the node is free again for the tests after this one
		})
		out, err = slurmAs(l, lab.JailUser, 60*time.Second, "srun", "--jobid", id, "--interactive",
			"-D", "/home/"+lab.JailUser, "sh", "-c", "echo step=$SLURM_STEP_ID; "+jailCheckScript(tok))
		if err != nil {
			t.Fatalf("srun --interactive: %v", err)
		}
		// SLURM_INTERACTIVE_STEP (0xfffffffa): 24.11 prints it unsigned,
		// 26.05 as a signed 32-bit number.
		if !strings.Contains(out, "step=4294967290\n") && !strings.Contains(out, "step=-6\n") {
			t.Errorf("not the interactive step:\n%s", out)
		}
		wantJailView(t, "interactive step", out)
	})

	t.Run("working directory only in the jail", func(t *testing.T) {
		// /shared exists in the jail, not on the node: slurmstepd's first
		// chdir (on the node) fails, its second one (in the jail) works.
		out, err := slurmAs(l, lab.JailUser, 60*time.Second, "srun", "-w", nodes[1], "-D", "/shared", "pwd")
		if err != nil {
			t.Fatalf("srun -D /shared: %v", err)
		}
		if got := strings.TrimSpace(out); got != "/shared" {
			t.Errorf("pwd = %q, want /shared", got)
		}
	})

	t.Run("a setuid program on the node gives no root", func(t *testing.T) {
		// An attacker's way up: a setuid-root program in a node-local
		// directory (here /tmp), run from inside a job. Every bind is
		// nosuid, so it runs with the user's own uid.
		prog := filepath.Join(l.RootFS(), "tmp", tok+"-id")
		b, err := os.ReadFile(filepath.Join(l.RootFS(), "usr/bin/id"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(prog, b, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(prog) })
		if err := os.Chown(prog, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(prog, 0o4755); err != nil {
			t.Fatal(err)
		}
		out, err := slurmAs(l, lab.JailUser, 60*time.Second, "srun", "-w", nodes[0], "-D", "/home/"+lab.JailUser,
			"sh", "-c", "/tmp/"+tok+"-id -u; grep -E ' /(tmp|run|dev) ' /proc/self/mountinfo")
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		if first, _, _ := strings.Cut(out, "\n"); first == "0" {
			t.Errorf("a setuid-root program from the node's /tmp ran as root in the job:\n%s", out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if opts := strings.Fields(line); len(opts) > 5 && !strings.Contains(opts[5], "nosuid") {
				t.Errorf("a node-local bind without nosuid: %s", line)
			}
		}
	})

	t.Run("no mount leaks onto the node", func(t *testing.T) {
		if ms, err := mount.Under(l.JailHostPath("")); err != nil || len(ms) != 0 {
			t.Errorf("mounts left under the jail on the host: %v (%v)", ms, err)
		}
		for m := range mountsUnder(t, l.RootFS()) {
			if !mountsBefore[m] {
				t.Errorf("a mount the jobs left in the node's root: %s", m)
			}
		}
	})
}

// TestJailFailsClosed: bad plugin arguments, a jail that is not there, or a
// working directory missing in the jail fail the step with the reason on the
// user's stderr and in the slurmd log, and the command never runs anywhere.
func TestJailFailsClosed(t *testing.T) {
	l := lab.Shared(t)
	node := l.NodeNames()[0]
	resumeIfDrained(t, l, node)
	nodeOnly := "/srv/" + uniqueName("node-only")
	if err := os.MkdirAll(filepath.Join(l.RootFS(), nodeOnly), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(l.RootFS(), nodeOnly)) })

	cases := []struct {
		name string
		args []string
		dir  string
		want string
	}{
		{"relative root", []string{"root=var/lib/onepool/jail"}, "/tmp",
			"bad plugstack.conf arguments: root=: 'var/lib/onepool/jail' is not an absolute path"},
		{"root is /", []string{"root=/"}, "/tmp", "bad plugstack.conf arguments: root=/: the jail cannot be the node's own root"},
		{"dot-dot in root", []string{"root=/var/lib/onepool/../onepool/jail"}, "/tmp", "has a '.' or '..' component"},
		{"no root", []string{"local=/dev"}, "/tmp", "root= is required"},
		{"unknown argument", []string{"root=" + lab.JailRoot, "mode=fast"}, "/tmp", "unknown argument 'mode=fast'"},
		{"proc bound", []string{"root=" + lab.JailRoot, "local=/dev,/proc"}, "/tmp", "/proc is always mounted fresh"},
		{"jail missing", []string{"root=/var/lib/onepool/no-such-jail"}, "/tmp",
			"jail root /var/lib/onepool/no-such-jail: No such file or directory"},
		{"bind source missing", []string{"root=" + lab.JailRoot, "bind=/opt/no-such-dir"}, "/tmp",
			"node-local /opt/no-such-dir: No such file or directory"},
		{"working directory missing in the jail", []string{"root=" + lab.JailRoot}, nodeOnly,
			"working directory " + nodeOnly + " does not exist inside the jail " + lab.JailRoot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.InstallJailPlugin(jailPluginSO(t, l), tc.args...); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.RemoveJailPlugin() })
			ran := uniqueName("ran")
			logPath := l.SlurmdLog(node)
			offset := fileSize(logPath)

			out, err := slurmAs(l, "", 60*time.Second, "srun", "-w", node, "-D", tc.dir, "sh", "-c", "touch /tmp/"+ran+"; echo RAN")
			if err == nil {
				t.Fatalf("srun succeeded (%q); want the step to fail", out)
			}
			if strings.Contains(out, "RAN") {
				t.Errorf("the command ran: %q", out)
			}
			if msg := err.Error(); !strings.Contains(msg, "onepool-jail: job ") || !strings.Contains(msg, tc.want) {
				t.Errorf("srun stderr lacks the reason %q:\n%s", tc.want, msg)
			}
			for _, p := range []string{filepath.Join(l.RootFS(), "tmp", ran), l.JailHostPath("/tmp/" + ran)} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s exists: the step ran", p)
					os.Remove(p)
				}
			}
			eventually(t, 10*time.Second, "slurmd log has the reason", func() (bool, string) {
				return strings.Contains(logSince(t, logPath, offset), tc.want), "not yet"
			})
		})
	}

	t.Run("batch job", func(t *testing.T) {
		if err := l.InstallJailPlugin(jailPluginSO(t, l), "root=/var/lib/onepool/no-such-jail"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.RemoveJailPlugin() })
		ran := uniqueName("ran")
		outFile := "/tmp/" + ran + ".out"
		out, err := slurmAs(l, "", 30*time.Second, "sbatch", "--parsable", "-w", node, "-D", "/tmp", "-o", outFile,
			"--wrap", "touch /tmp/"+ran)
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		id := strings.TrimSpace(out)
		if state := jobDone(t, l, id); state != "FAILED" {
			t.Errorf("batch job %s: %s, want FAILED", id, state)
		}
		b, err := os.ReadFile(filepath.Join(l.RootFS(), outFile))
		if err != nil {
			t.Fatalf("the job's stderr file: %v", err)
		}
		t.Cleanup(func() { os.Remove(filepath.Join(l.RootFS(), outFile)) })
		if want := "onepool-jail: job " + id + " step batch not started: jail root /var/lib/onepool/no-such-jail"; !strings.Contains(string(b), want) {
			t.Errorf("the job's stderr lacks %q:\n%s", want, b)
		}
		if _, err := os.Stat(filepath.Join(l.RootFS(), "tmp", ran)); err == nil {
			t.Errorf("the batch script ran outside the jail")
		}
	})
}
