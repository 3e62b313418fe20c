package e2e

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/images"
	"github.com/onepool/onepool/test/lab/oci"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// The lab's Slurm release gets node-agent images of its own (`make images
// SLURM=26.05` on 26.05): made as `make images` makes them, from the lab's
// rootfs and its own build of the jail plugin, then read back as a node
// would run them. The image's slurmd is the lab's release, its jail plugin
// was compiled for that release (slurmd refuses a plugin of another), and
// its tag names the release unless it is the default one.
func TestImagesOfEachSlurmRelease(t *testing.T) {
	l := lab.Shared(t)
	rel := l.Release()
	plugin := l.JailPluginBuild()
	require.FileExists(t, plugin, "`make lab-spank` builds the lab's jail plugin")
	src, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	b := images.Builder{RootFS: l.RootFS(), BinDir: l.BinDir(), Dir: dir, Src: src, Plugin: plugin, Release: rel, Log: io.Discard}
	require.NoError(t, b.Build(context.Background(), "e2e", []string{"node-agent"}))

	ref, files := readImage(t, filepath.Join(dir, "node-agent.tar"), strings.TrimPrefix(slurmconf.JailPluginPath, "/"), "var/lib/dpkg/status")
	wantTag := "e2e"
	if rel.Name != rootfs.Default().Name {
		wantTag = "e2e-slurm" + rel.Name
	}
	assert.Equal(t, "onepool/node-agent:"+wantTag, ref)

	status, ok := files["var/lib/dpkg/status"]
	require.True(t, ok, "the image has dpkg's status")
	slurmd := dpkgVersion(t, status, "slurmd")
	assert.True(t, strings.HasPrefix(slurmd, rel.Name+"."), "the image's slurmd %s is Slurm %s", slurmd, rel.Name)

	so, ok := files[strings.TrimPrefix(slurmconf.JailPluginPath, "/")]
	require.True(t, ok, "the image has the jail plugin at %s", slurmconf.JailPluginPath)
	path := filepath.Join(t.TempDir(), "onepool_jail.so")
	require.NoError(t, os.WriteFile(path, so, 0o644))
	got, err := images.PluginRelease(path)
	require.NoError(t, err)
	assert.Equal(t, rel.Name, got, "the image's jail plugin was built for its slurmd's release")
	t.Logf("onepool/node-agent:%s: slurmd %s, jail plugin for Slurm %s", wantTag, slurmd, got)
}

// readImage returns an OCI archive's ref name and the contents of the
// files named in want, read from its layers (a later layer's copy wins).
func readImage(t *testing.T, archive string, want ...string) (string, map[string][]byte) {
	t.Helper()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	files, ref := map[string][]byte{}, ""
	outer := tar.NewReader(f)
	for {
		h, err := outer.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		name := strings.TrimPrefix(h.Name, "./")
		if name == "index.json" {
			var idx struct {
				Manifests []struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"manifests"`
			}
			require.NoError(t, json.NewDecoder(outer).Decode(&idx))
			require.Len(t, idx.Manifests, 1)
			ref = idx.Manifests[0].Annotations[oci.AnnotationRefName]
			continue
		}
		if !strings.HasPrefix(name, "blobs/") || h.Size < 1024 {
			continue
		}
		// A layer is an uncompressed tar; the config and manifest are JSON.
		inner := tar.NewReader(outer)
		for {
			ih, err := inner.Next()
			if err != nil {
				break
			}
			iname := strings.TrimPrefix(ih.Name, "./")
			for _, w := range want {
				if iname == w {
					b, err := io.ReadAll(inner)
					require.NoError(t, err)
					files[w] = b
				}
			}
		}
	}
	return ref, files
}

// dpkgVersion is the Version of an installed package in dpkg's status.
func dpkgVersion(t *testing.T, status []byte, pkg string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(status)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			in = false
		case line == "Package: "+pkg:
			in = true
		case in && strings.HasPrefix(line, "Version: "):
			return strings.TrimPrefix(line, "Version: ")
		}
	}
	t.Fatalf("dpkg's status lists no %s", pkg)
	return ""
}
