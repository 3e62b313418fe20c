package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab"
)

// The README's "first five minutes", run as written on the lab, line by
// line (each in bash from the repository's root, after the block's eval
// lines): every line exits 0, and a line marked `# shows: TEXT` prints
// TEXT within a minute (it is run again until it does, as a reader would).
// The only changes: `.lab/` is the lab this suite runs on, and the slurmd
// pods `make up` gives the static nodes are made here and taken away after.
func TestREADMEFirstFiveMinutes(t *testing.T) {
	l := lab.Shared(t)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	steps, err := readmeSteps(filepath.Join(root, "README.md"), "## The first five minutes")
	require.NoError(t, err)
	shows := 0
	for _, s := range steps {
		if s.shows != "" {
			shows++
		}
	}
	require.GreaterOrEqual(t, shows, 5, "the README's block checks what a reader sees")

	// What `make up` adds to `lab up`: a slurmd pod for each static node,
	// taken away again after (its drains resumed): the other suites make
	// their own.
	ctx := context.Background()
	t.Cleanup(func() {
		if err := l.RemoveStaticSlurmdPods(ctx); err != nil {
			t.Errorf("make up's slurmd pods: %v", err)
		}
	})
	require.NoError(t, l.StaticSlurmdPods(ctx), "make up's slurmd pods")

	labDir := filepath.Dir(l.BinDir())
	var setup []string
	run := func(cmd string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "bash", "-c", strings.Join(append(append([]string{}, setup...), cmd), "\n"))
		c.Dir = root
		c.Env = append(os.Environ(), "ONEPOOL_LAB_DIR="+labDir)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	// What the block changes, undone whatever happens (each may have been
	// undone by the block already).
	t.Cleanup(func() {
		for _, cmd := range []string{
			"kubectl uncordon gpu-1",
			"lab slurm-exec scontrol update nodename=gpu-2 state=resume",
			"kubectl delete pod -n default first --ignore-not-found --wait=false",
			"lab slurm-exec scancel --qos=high",
		} {
			if out, err := run(cmd); err != nil {
				t.Logf("cleanup %q: %v: %s", cmd, err, out)
			}
		}
	})
	for i, s := range steps {
		cmd := strings.ReplaceAll(s.cmd, ".lab/", labDir+"/")
		t.Logf("README line %d: %s", s.line, s.cmd)
		if s.shows == "" {
			out, err := run(cmd)
			require.NoError(t, err, "README line %d: %s\n%s", s.line, s.cmd, out)
			if strings.HasPrefix(cmd, "eval ") || strings.HasPrefix(cmd, "export ") {
				setup = append(setup, cmd)
			}
			continue
		}
		eventually(t, time.Minute, fmt.Sprintf("README line %d (step %d) shows %q", s.line, i+1, s.shows), func() (bool, string) {
			out, err := run(cmd)
			return err == nil && strings.Contains(out, s.shows), fmt.Sprintf("%v: %s", err, strings.TrimSpace(out))
		})
	}
}

// readmeStep is one command of a README block: a line, or a line with a
// here-document and its lines; shows is what its `# shows:` says it prints.
type readmeStep struct {
	line  int
	cmd   string
	shows string
}

// readmeSteps reads the first ```sh block after the heading into commands.
func readmeSteps(path, heading string) ([]readmeStep, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []readmeStep
	var heredoc *readmeStep
	state := 0 // 0 before the heading, 1 before the block, 2 in it
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case state == 0:
			if line == heading {
				state = 1
			}
		case state == 1:
			if strings.HasPrefix(line, "## ") {
				return nil, fmt.Errorf("%s: no sh block under %q", path, heading)
			}
			if line == "```sh" {
				state = 2
			}
		case heredoc != nil:
			heredoc.cmd += "\n" + line
			if line == "EOF" {
				steps = append(steps, *heredoc)
				heredoc = nil
			}
		case line == "```":
			return steps, nil
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		default:
			s := readmeStep{line: n, cmd: line}
			if cmd, shows, ok := strings.Cut(line, "# shows: "); ok {
				s.cmd, s.shows = strings.TrimSpace(cmd), strings.TrimSpace(shows)
			}
			if strings.Contains(s.cmd, "<<'EOF'") {
				heredoc = &s
				continue
			}
			steps = append(steps, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no complete sh block under %q", path, heading)
}
