package oci

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readTar returns every regular file of a tar by name.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, hdrs
		}
		require.NoError(t, err)
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = b
		}
	}
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// An archive as `ctr images import` reads it: index.json names the image,
// every blob's name is its digest, the config lists the layers' diff IDs
// in order, and the layers hold the files with their modes and owners.
func TestWriteArchiveIsAValidOCIImage(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/share/doc/x"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/share/doc/x/README"), []byte("docs"), 0o644))
	require.NoError(t, os.Symlink("tool", filepath.Join(root, "usr/bin/alias")))
	require.NoError(t, os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))

	base, err := LayerFromDir(filepath.Join(dir, "base.tar"), root, func(rel string) bool { return rel == "usr/share/doc" })
	require.NoError(t, err)
	top, err := LayerFromFiles(filepath.Join(dir, "top.tar"), []File{
		{Name: "/usr/local/bin/agent", Mode: 0o755, Content: []byte("ELF")},
		{Name: "/etc/slurm", Mode: os.ModeDir | 0o755, UID: 64030},
	})
	require.NoError(t, err)
	again, err := LayerFromFiles(filepath.Join(dir, "top2.tar"), []File{
		{Name: "/usr/local/bin/agent", Mode: 0o755, Content: []byte("ELF")},
		{Name: "/etc/slurm", Mode: os.ModeDir | 0o755, UID: 64030},
	})
	require.NoError(t, err)
	assert.Equal(t, top.Digest, again.Digest, "the same files make the same layer")

	archive := filepath.Join(dir, "img.tar")
	require.NoError(t, WriteArchive(archive, "onepool/agent:abc", Config{Entrypoint: []string{"/usr/local/bin/agent", "run"}, User: "65532:65532"}, []Layer{base, top}))
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	files, _ := readTar(t, f)

	assert.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))
	for name, b := range files {
		if d, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			assert.Equal(t, "sha256:"+d, digestOf(b), "blob %s", name)
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(files["index.json"], &index))
	require.Len(t, index.Manifests, 1)
	assert.Equal(t, "onepool/agent:abc", index.Manifests[0].Annotations[AnnotationRefName])
	var manifest struct {
		Config struct{ Digest string } `json:"config"`
		Layers []struct {
			MediaType, Digest string
			Size              int64
		} `json:"layers"`
	}
	require.NoError(t, json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &manifest))
	require.Len(t, manifest.Layers, 2)
	assert.Equal(t, base.Digest, manifest.Layers[0].Digest)
	assert.Equal(t, top.Digest, manifest.Layers[1].Digest)
	var config struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	require.NoError(t, json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config))
	assert.Equal(t, []string{base.Digest, top.Digest}, config.RootFS.DiffIDs)
	assert.Equal(t, []string{"/usr/local/bin/agent", "run"}, config.Config.Entrypoint)
	assert.Equal(t, "65532:65532", config.Config.User)

	baseFiles, baseHdrs := readTar(t, strings.NewReader(string(files["blobs/sha256/"+strings.TrimPrefix(base.Digest, "sha256:")])))
	assert.Equal(t, "#!/bin/sh\n", string(baseFiles["usr/bin/tool"]))
	assert.Equal(t, int64(0o755), baseHdrs["usr/bin/tool"].Mode&0o777)
	assert.Equal(t, "tool", baseHdrs["usr/bin/alias"].Linkname)
	assert.Equal(t, byte(tar.TypeLink), baseHdrs["usr/bin/tool2"].Typeflag)
	assert.Equal(t, "usr/bin/tool", baseHdrs["usr/bin/tool2"].Linkname)
	assert.NotContains(t, baseHdrs, "usr/share/doc/")
	assert.NotContains(t, baseHdrs, "usr/share/doc/x/README")

	_, topHdrs := readTar(t, strings.NewReader(string(files["blobs/sha256/"+strings.TrimPrefix(top.Digest, "sha256:")])))
	assert.Contains(t, topHdrs, "usr/local/bin/", "parent folders are added")
	assert.Equal(t, 64030, topHdrs["etc/slurm/"].Uid)
}

// A layer file changed after its digest was taken is refused, not
// written into an image under the old digest.
func TestWriteArchiveRefusesAChangedLayer(t *testing.T) {
	dir := t.TempDir()
	l, err := LayerFromFiles(filepath.Join(dir, "l.tar"), []File{{Name: "a", Mode: 0o644, Content: []byte("one")}})
	require.NoError(t, err)
	require.NoError(t, SaveLayer(l))
	loaded, err := LoadLayer(l.Path)
	require.NoError(t, err)
	assert.Equal(t, l, loaded)
	b, err := os.ReadFile(l.Path)
	require.NoError(t, err)
	b[len(b)-1] ^= 1 // same size, other bytes
	require.NoError(t, os.WriteFile(l.Path, b, 0o644))
	err = WriteArchive(filepath.Join(dir, "img.tar"), "x/y:z", Config{}, []Layer{loaded})
	require.ErrorContains(t, err, "changed")
	assert.NoFileExists(t, filepath.Join(dir, "img.tar"))
}
