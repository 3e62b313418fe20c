package rootfs

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/oci"
)

// The base layer is the rootfs less what must not be in an image: the
// munge key Debian generated, the lab's own tools, the runtime's folders'
// content, apt's lists.
func TestBaseLayerLeavesOutKeysToolsAndRuntimeFolders(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"etc/munge/munge.key":                "secret",
		"usr/sbin/slurmd":                    "ELF",
		"usr/bin/containerd":                 "ELF",
		"var/lib/dpkg/info/containerd.list":  "/.\n/usr\n/usr/bin\n/usr/bin/containerd\n",
		"var/lib/apt/lists/deb.debian.org_x": "list",
		"dev/null":                           "",
		"etc/resolv.conf":                    "nameserver 10.0.0.1",
		"usr/share/doc/slurmd/copyright":     "text",
		Marker:                               "pkgs",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o644))
	}
	layer, err := WriteBaseLayer(root, filepath.Join(t.TempDir(), "base.tar"))
	require.NoError(t, err)
	loaded, err := oci.LoadLayer(layer.Path)
	require.NoError(t, err)
	assert.Equal(t, layer, loaded, "the digest is kept beside the layer")
	f, err := os.Open(layer.Path)
	require.NoError(t, err)
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
	}
	assert.Contains(t, names, "usr/sbin/slurmd")
	assert.Contains(t, names, "dev/", "the folder stays")
	assert.Contains(t, names, "etc/munge/")
	for _, gone := range []string{"etc/munge/munge.key", "usr/bin/containerd", "usr/libexec/gcc/cc1", "var/lib/apt/lists/deb.debian.org_x", "dev/null", "etc/resolv.conf", "usr/share/doc/slurmd/copyright", Marker} {
		assert.NotContains(t, names, gone)
	}
}
