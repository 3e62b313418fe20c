package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// bash copied with its libraries runs in an otherwise empty root.
func TestCopyELFIntoRunsInAnEmptyRoot(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bash"); err != nil {
		t.Skip("no /usr/bin/bash on this machine")
	}
	jail := t.TempDir()
	require.NoError(t, copyELFInto("/", jail, "/usr/bin/bash"))
	require.FileExists(t, filepath.Join(jail, "usr/bin/bash"))
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	out, err := exec.Command("chroot", jail, "/usr/bin/bash", "-c", "echo in the jail: $BASH_VERSION").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "in the jail: ")
}

func TestResolveInKeepsAbsoluteLinksInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/real"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("/usr/lib", filepath.Join(root, "lib")))
	require.NoError(t, os.Symlink("real", filepath.Join(root, "usr/lib/link")))
	got, err := resolveIn(root, "/lib/link")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "usr/lib/real"), got)
	_, err = resolveIn(root, "/lib/missing")
	require.Error(t, err)
}
