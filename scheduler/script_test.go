package scheduler

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// script is a running placeholder script; done receives its exit once (one
// Wait, so the tests race nothing).
type script struct {
	cmd  *exec.Cmd
	done chan error
}

// runScript runs the placeholder script with real bash against a release
// endpoint that answers 409 until gone is set.
func runScript(t *testing.T, gone *atomic.Bool, asked *atomic.Int32) *script {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/placeholders/42" {
			http.Error(w, "wrong path "+r.URL.Path, http.StatusNotFound)
			return
		}
		asked.Add(1)
		if gone.Load() {
			_, _ = w.Write([]byte("gone\n"))
			return
		}
		http.Error(w, "pod present", http.StatusConflict)
	}))
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	cmd := exec.Command("bash", "-c", placeholderScript(owner{Namespace: "ns", Name: "p", UID: "u"}, host, port))
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=gpu-0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := &script{cmd: cmd, done: make(chan error, 1)}
	waited := make(chan struct{})
	go func() { defer close(waited); sc.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-waited })
	return sc
}

// exited says whether the script ended within the given time, and how.
func exited(sc *script, within time.Duration) (bool, error) {
	select {
	case err := <-sc.done:
		return true, err
	case <-time.After(within):
		return false, nil
	}
}

func TestPlaceholderScriptHoldsUntilPodGone(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	var gone atomic.Bool
	var asked atomic.Int32
	sc := runScript(t, &gone, &asked)
	time.Sleep(300 * time.Millisecond)
	// Slurm signals the whole job: the script and its sleep.
	if err := syscall.Kill(-sc.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if asked.Load() == 0 {
		t.Fatal("after SIGTERM the script never asked whether its pod is gone")
	}
	// Every half second, not in a loop: one script per placeholder job
	// asks the scheduler's endpoint while its pod goes.
	if n := asked.Load(); n > 8 {
		t.Fatalf("asked %d times in 1.5 s after SIGTERM; want about 3 (every 0.5 s)", n)
	}
	select {
	case err := <-sc.done:
		t.Fatalf("the script ended while its pod still exists (%v)", err)
	default:
	}
	gone.Store(true)
	ok, err := exited(sc, 5*time.Second)
	if !ok || err != nil {
		t.Fatalf("once the pod is gone the script should exit 0; exited=%v err=%v", ok, err)
	}
}

func TestPlaceholderScriptIgnoresAnswersBeforeSIGTERM(t *testing.T) {
	var gone atomic.Bool
	var asked atomic.Int32
	gone.Store(true)
	sc := runScript(t, &gone, &asked)
	if ok, _ := exited(sc, time.Second); ok {
		t.Fatal("the script ended without being told to")
	}
	if asked.Load() != 0 {
		t.Errorf("asked %d times before any SIGTERM", asked.Load())
	}
}

// Slurm may end a placeholder job milliseconds after it started (the pod
// deleted while its job was asked: the e2e saw a job cancelled 0.3 s after
// its submission stay COMPLETING for KillWait). A SIGTERM at any moment of
// the script's start must not leave it in a long sleep the signal missed:
// with the pod gone, it ends within seconds, wherever the signal landed.
func TestPlaceholderScriptTERMAtAnyMomentOfItsStart(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for us := 0; us <= 30000; us += 500 {
		var gone atomic.Bool
		var asked atomic.Int32
		gone.Store(true)
		sc := runScript(t, &gone, &asked)
		time.Sleep(time.Duration(us) * time.Microsecond)
		if err := syscall.Kill(-sc.cmd.Process.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if ok, _ := exited(sc, 5*time.Second); !ok {
			t.Fatalf("SIGTERM %d µs after the start: the script still runs 5 s later with its pod gone", us)
		}
	}
}
