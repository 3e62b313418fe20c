package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onepool/onepool/test/lab"
)

// The README's slurm.conf checklist, read from the live cluster: the lab's
// Slurm has every setting, so check-slurm says ok and names nothing, and
// the controller manager's check at start finds nothing missing.
func TestCheckSlurmOnTheLab(t *testing.T) {
	l := lab.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(l.BinDir(), "onepool-controller-manager"), "check-slurm",
		"--slurmrest-url", l.RESTURL(), "--slurmrest-token-file", l.TokenFile()).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || !strings.HasPrefix(lines[len(lines)-1], "ok: ") || strings.Contains(string(out), "MISSING") {
		t.Fatalf("check-slurm on the lab: %v\n%s", err, out)
	}
	// The lab's slurmrestd runs with -s openapi/slurmctld alone: its
	// /slurmdb/ paths answer 404, which says nothing of slurmdbd (the lab
	// has it). Said as not checked, not as missing.
	if !strings.Contains(string(out), "NOT CHECKED AccountingStorageType") || !strings.Contains(string(out), "openapi/slurmdbd") {
		t.Errorf("check-slurm does not say that accounting could not be checked through this slurmrestd:\n%s", out)
	}
	t.Logf("%s", out)

	// A token slurmrestd refuses: an error, not a clean bill.
	bad := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(bad, []byte("not-a-jwt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, filepath.Join(l.BinDir(), "onepool-controller-manager"), "check-slurm",
		"--slurmrest-url", l.RESTURL(), "--slurmrest-token-file", bad).CombinedOutput()
	if err == nil || strings.Contains(string(out), "ok: ") || strings.Contains(string(out), "not-a-jwt") {
		t.Errorf("check-slurm with a refused token: %v\n%s", err, out)
	}

	if lab.ChartMode() {
		return // the manager's log is its pod's
	}
	eventually(t, 90*time.Second, "the controller manager's check at start", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(l.LogDir(), "onepool-controller-manager.out"))
		if err != nil {
			return false, err.Error()
		}
		// The log holds every start of the lab's manager, some of them on a
		// Slurm a test took apart: one clean check is what it must show.
		log := string(b)
		return strings.Contains(log, "Slurm lacks none of the settings onepool checked"), grepLines(log, "slurm-check")
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
