package rootfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       manifest
		err        string
	}{
		{"comments and blanks", "# header\n\nslurmd 24.11.5-4\nlibmariadb3:amd64 1:11.8.9+ds-0+deb13u1\n",
			manifest{"slurmd": "24.11.5-4", "libmariadb3:amd64": "1:11.8.9+ds-0+deb13u1"}, ""},
		{"empty", "# nothing\n", manifest{}, ""},
		{"three fields", "slurmd 24.11 extra\n", nil, `line 1: want "package version"`},
		{"one field", "# c\nslurmd\n", nil, "line 2"},
		{"twice", "a 1\na 2\n", nil, "package a listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseManifest(tc.text)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDiffManifest(t *testing.T) {
	proven := manifest{"libmariadb3:amd64": "1:11.8.3", "slurmdbd": "24.11.5-4", "gone": "1", "same": "2"}
	built := manifest{"libmariadb3:amd64": "1:11.8.9", "slurmdbd": "24.11.5-4", "new": "3", "same": "2"}
	got := diffManifest(proven, built)
	var lines []string
	for _, c := range got {
		lines = append(lines, c.String())
	}
	assert.Equal(t, []string{
		"- gone 1 (gone)",
		"~ libmariadb3:amd64 1:11.8.3 -> 1:11.8.9",
		"+ new 3 (new)",
	}, lines)
	assert.Empty(t, diffManifest(built, built))
}

func TestManifestRoundTrip(t *testing.T) {
	m := manifest{"b": "2", "a": "1:1.0+x"}
	text := m.format("line one\nline two")
	assert.Equal(t, "# line one\n# line two\na 1:1.0+x\nb 2\n", text)
	back, err := parseManifest(text)
	require.NoError(t, err)
	assert.Equal(t, m, back)
}

// The committed manifest must parse and name what the lab depends on: the
// lab binary embeds it and compares every rootfs with it.
func TestProvenManifest(t *testing.T) {
	for i, r := range Releases() {
		m, err := parseManifest(r.proven)
		require.NoError(t, err, r.ProvenManifestFile())
		if i > 0 && len(m) == 0 {
			continue // a release not proven yet
		}
		for _, p := range []string{"slurmctld", "slurmd", "slurmrestd", "slurmdbd", "munge", "mariadb-server", "libmariadb3:amd64"} {
			assert.Contains(t, m, p, r.ProvenManifestFile())
		}
	}
}

// A hand-edited version in the lab's manifest shows in `lab status` and in
// what `lab up` prints, by package and both versions.
func TestReportDriftNamesChangedPackage(t *testing.T) {
	proven, err := parseManifest(Default().proven)
	require.NoError(t, err)
	edited := manifest{}
	for k, v := range proven {
		edited[k] = v
	}
	edited["slurmdbd"] = "24.11.0-0"
	dir := t.TempDir()
	var log bytes.Buffer
	b := Builder{Root: filepath.Join(dir, "rootfs"), Release: Default(), LogDir: dir, Log: &log}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rootfs.manifest"), []byte(edited.format("test")), 0o644))

	require.NoError(t, b.reportDrift(context.Background()))
	assert.Contains(t, log.String(), "differs from the packages last proven")
	assert.Contains(t, log.String(), "~ slurmdbd "+proven["slurmdbd"]+" -> 24.11.0-0")
	// Only the edited package.
	assert.Equal(t, 1, strings.Count(log.String(), "lab:   "))

	var status bytes.Buffer
	require.NoError(t, b.Status(context.Background(), &status))
	assert.Contains(t, status.String(), "differs from test/lab/rootfs/rootfs-trixie.manifest (last proven) in 1 packages")
}
