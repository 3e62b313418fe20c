package e2e

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Faults the soak injects. Each holds for a few seconds, during which the
// soak goes on with operations (faults meet operations: the combinations
// are what the peers' worst bugs came from), then is undone; the soak then
// waits for convergence and times it.

type soakFault struct {
	name    string
	weight  int
	inject  func(ctx context.Context) error
	restore func(ctx context.Context) error
}

func (s *soak) faultKinds() []soakFault {
	up := func(ctx context.Context) error { return s.l.Up(ctx) }
	kill := func(daemon string, weight int) soakFault {
		return soakFault{"SIGKILL " + daemon, weight, func(context.Context) error {
			s.mu.Lock()
			s.lastKill[daemon] = time.Now()
			s.mu.Unlock()
			return s.l.KillDaemon(daemon)
		}, up}
	}
	node := s.node()
	fs := []soakFault{
		kill("slurmctld", 4), kill("slurmrestd", 3), kill("slurmdbd", 2), kill("etcd", 2), kill("kube-apiserver", 3),
		kill("onepool-controller-manager", 4), kill("onepool-scheduler", 4), kill("slurmd-"+node, 3),
		{"scontrol reconfigure", 2, s.l.Reconfigure, nil},
		{"token rotated", 2, s.rotateToken, nil},
		{"token spoiled", 2, s.spoilToken, s.rotateToken},
		{"slurmd pod deleted on " + node, 2, func(ctx context.Context) error {
			return s.kc.CoreV1().Pods(s.ns).Delete(ctx, "slurmd-"+node, metav1.DeleteOptions{})
		}, func(ctx context.Context) error { return s.ensureSlurmdPod(ctx, node) }},
		{"Node " + node + " deleted", 2, func(ctx context.Context) error {
			return s.kc.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		}, func(ctx context.Context) error {
			if err := s.l.RestoreKubeNodes(ctx); err != nil {
				return err
			}
			return s.ensureSlurmdPod(ctx, node)
		}},
	}
	for m := proxySlow; m < proxyModeLast; m++ {
		fs = append(fs, soakFault{"slurmrestd answers " + m.String(), 3,
			func(context.Context) error { s.px.set(m); return nil },
			func(context.Context) error { s.px.set(proxyPass); return nil }})
	}
	return fs
}

// fault injects one random fault, goes on with operations while it holds,
// undoes it and times the convergence.
func (s *soak) fault() {
	f := pick(s, s.faultKinds(), func(f soakFault) int { return f.weight })
	s.setStep("fault " + f.name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := f.inject(ctx); err != nil {
		s.t.Logf("soak step %d: inject %s: %v", s.step, f.name, err)
	}
	hold := time.Now().Add(time.Duration(2+s.rng.IntN(14)) * time.Second)
	for n := s.rng.IntN(4); n > 0 && time.Now().Before(hold); n-- {
		s.op()
		s.setStep("fault " + f.name + " (holding)")
	}
	time.Sleep(time.Until(hold))
	undone := time.Now()
	// Before the lab is brought back: whatever is down now and was not
	// the fault's own kill exited by itself.
	s.checkExits(f.name)
	if f.restore != nil {
		if err := f.restore(ctx); err != nil {
			s.violate("the lab came back after "+f.name, err.Error())
		}
	}
	s.mu.Lock()
	s.faults++
	s.mu.Unlock()
	s.awaitConvergence(f.name, undone)
}

// rotateToken gives the components a new token, as a Secret rotation
// would: a fresh one in the file they read.
func (s *soak) rotateToken(ctx context.Context) error {
	tok, err := s.l.MintToken(ctx, "slurm", 4*time.Hour)
	if err != nil {
		return err
	}
	return writeAtomic(s.l.TokenFile(), tok)
}

// spoilToken leaves the components a token Slurm refuses (HTTP 511).
func (s *soak) spoilToken(context.Context) error {
	return writeAtomic(s.l.TokenFile(), "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJzbHVybSJ9.c29hay1zcG9pbGVk")
}

func writeAtomic(path, body string) error {
	tmp := fmt.Sprintf("%s.soak-%d", path, time.Now().UnixNano())
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
