package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDriverRoot lays out a driver as its installer does: versioned
// libraries with soname links (one absolute, as some installers write),
// and nvidia-smi.
func fakeDriverRoot(t *testing.T, libDir string) string {
	t.Helper()
	root := t.TempDir()
	lib := filepath.Join(root, libDir)
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	for _, f := range []string{"libnvidia-ml.so.550.54.15", "libcuda.so.550.54.15", "usr/bin/nvidia-smi"} {
		p := filepath.Join(lib, f)
		if filepath.Dir(f) != "." {
			p = filepath.Join(root, f)
		}
		require.NoError(t, os.WriteFile(p, []byte("fake"), 0o755))
	}
	require.NoError(t, os.Symlink("libnvidia-ml.so.550.54.15", filepath.Join(lib, "libnvidia-ml.so.1")))
	require.NoError(t, os.Symlink("/"+libDir+"/libcuda.so.550.54.15", filepath.Join(lib, "libcuda.so.1")))
	return root
}

func TestDriverRootFiles(t *testing.T) {
	for _, libDir := range []string{"usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64"} {
		t.Run(libDir, func(t *testing.T) {
			dir := fakeDriverRoot(t, libDir)
			r := DriverRoot{Host: "/run/nvidia/driver", Dir: dir}
			files, err := r.Files()
			require.NoError(t, err)
			assert.Equal(t, []DriverFile{
				{HostPath: "/run/nvidia/driver/" + libDir + "/libnvidia-ml.so.550.54.15", ContainerPath: "/usr/local/nvidia/lib64/libnvidia-ml.so.1"},
				{HostPath: "/run/nvidia/driver/" + libDir + "/libcuda.so.550.54.15", ContainerPath: "/usr/local/nvidia/lib64/libcuda.so.1"},
				{HostPath: "/run/nvidia/driver/usr/bin/nvidia-smi", ContainerPath: "/usr/local/nvidia/bin/nvidia-smi"},
			}, files)
			assert.Equal(t, filepath.Join(dir, libDir, "libnvidia-ml.so.1"), r.NVMLPath())
		})
	}
}

func TestDriverRootBad(t *testing.T) {
	empty := t.TempDir()
	_, err := DriverRoot{Host: "/", Dir: empty}.Files()
	assert.ErrorIs(t, err, ErrNoDriverLibs)
	assert.Empty(t, DriverRoot{Host: "/", Dir: empty}.NVMLPath())

	_, err = DriverRoot{Host: "/"}.Files()
	assert.Error(t, err)

	// A link that leads out of the root is not followed: the file the
	// runtime would mount is not the driver's.
	out := t.TempDir()
	lib := filepath.Join(out, "usr/lib64")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.Symlink("../../../etc/shadow", filepath.Join(lib, "libnvidia-ml.so.1")))
	_, err = DriverRoot{Host: "/", Dir: out}.Files()
	assert.ErrorIs(t, err, ErrNoDriverLibs)

	// A loop ends.
	loop := t.TempDir()
	lib = filepath.Join(loop, "usr/lib64")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.Symlink("libnvidia-ml.so.1", filepath.Join(lib, "libnvidia-ml.so.1")))
	_, err = DriverRoot{Host: "/", Dir: loop}.Files()
	assert.ErrorIs(t, err, ErrNoDriverLibs)
}
