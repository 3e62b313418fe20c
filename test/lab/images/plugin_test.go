package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/rootfs"
)

// buildPlugin compiles a shared object from src with the machine's gcc.
func buildPlugin(t *testing.T, src string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	c, so := filepath.Join(dir, "p.c"), filepath.Join(dir, "p.so")
	require.NoError(t, os.WriteFile(c, []byte(src), 0o644))
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", so, c).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return so
}

// What spank.h's SPANK_PLUGIN(name, 1) defines, with the
// SLURM_VERSION_NUMBER of a release's slurm_version.h.
func spankPlugin(versionNumber string) string {
	return `const char plugin_name[] = "onepool_jail";
const char plugin_type[] = "spank";
const unsigned int plugin_version = ` + versionNumber + `;
const unsigned int spank_plugin_version = 1;
int slurm_spank_init(void *sp, int ac, char **av) { return 0; }
`
}

func TestPluginRelease(t *testing.T) {
	for _, tc := range []struct {
		name, src, want, wantErr string
	}{
		{name: "24.11.5", src: spankPlugin("0x180b05"), want: "24.11"},
		{name: "26.05.5", src: spankPlugin("0x1a0505"), want: "26.05"},
		{name: "not a Slurm plugin", src: "int f(void) { return 0; }\n", wantErr: "no plugin_version symbol"},
		{name: "plugin_version of another size", src: "const unsigned long long plugin_version = 0x180b05;\n", wantErr: "not a 4-byte constant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PluginRelease(buildPlugin(t, tc.src))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := PluginRelease(filepath.Join(t.TempDir(), "missing.so"))
	require.Error(t, err)
}

// An image is never made with a jail plugin of another release: slurmd
// would refuse to load it.
func TestCheckPlugin(t *testing.T) {
	p2411 := buildPlugin(t, spankPlugin("0x180b05"))
	require.NoError(t, checkPlugin(p2411, "24.11"))
	err := checkPlugin(p2411, "26.05")
	require.ErrorContains(t, err, "was built for Slurm 24.11, the images are Slurm 26.05's: slurmd would refuse it")
	require.ErrorContains(t, err, "`make images SLURM=26.05`")
}

func TestImageTags(t *testing.T) {
	r2605, err := rootfs.Named("26.05")
	require.NoError(t, err)
	assert.Equal(t, "13a76b8", Builder{}.Tag("13a76b8"), "the default release")
	assert.Equal(t, "13a76b8", Builder{Release: rootfs.Default()}.Tag("13a76b8"))
	assert.Equal(t, "13a76b8-slurm26.05", Builder{Release: r2605}.Tag("13a76b8"))
}
