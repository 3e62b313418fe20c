package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// RunLogged runs a host command with a deadline, its output appended to logPath.
func RunLogged(ctx context.Context, timeout time.Duration, logPath string, argv ...string) error {
	return RunLoggedIn(ctx, timeout, logPath, "", argv...)
}

// RunLoggedIn runs argv inside chroot root (or on the host when root is "").
func RunLoggedIn(ctx context.Context, timeout time.Duration, logPath, root string, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	prog := argv[0]
	if root != "" {
		if prog, err = LookPath(root, argv[0]); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, prog, argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if root != "" {
		cmd.Env = Env()
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	} else {
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fmt.Errorf("%s failed: %w (log: %s)", strings.Join(argv, " "), err, logPath)
	}
	return nil
}

// Output runs argv inside root and returns its stdout; stderr goes into the error.
func Output(ctx context.Context, timeout time.Duration, root string, env []string, argv ...string) ([]byte, error) {
	return OutputStdin(ctx, timeout, root, env, "", argv...)
}

// OutputStdin is Output with stdin (for what must not show in argv).
func OutputStdin(ctx context.Context, timeout time.Duration, root string, env []string, stdin string, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path, err := LookPath(root, argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Path = path
	cmd.Env = append(Env(), env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %s: %w", timeout, ctx.Err())
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// LookPath finds prog in the chroot's PATH (an absolute path is kept).
func LookPath(root, prog string) (string, error) {
	if strings.HasPrefix(prog, "/") {
		return prog, nil
	}
	for _, dir := range []string{"/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if st, err := os.Stat(filepath.Join(root, dir, prog)); err == nil && !st.IsDir() {
			return filepath.Join(dir, prog), nil
		}
	}
	return "", errors.New(prog + ": not found in the lab rootfs")
}
