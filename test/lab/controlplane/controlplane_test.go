package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/pki"
)

func TestCheckToolsNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	c := ControlPlane{BinDir: filepath.Join(dir, "bin"), KwokStages: filepath.Join(dir, "kwok-stages.yaml")}
	require.NoError(t, os.MkdirAll(c.BinDir, 0o755))
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		require.NoError(t, os.WriteFile(filepath.Join(c.BinDir, b), nil, 0o755))
	}
	err := c.CheckTools()
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(c.BinDir, "kwok")+" is not built: run `make tools`")
	require.NoError(t, os.WriteFile(filepath.Join(c.BinDir, "kwok"), nil, 0o755))
	assert.ErrorContains(t, c.CheckTools(), "kwok stages missing")
	require.NoError(t, os.WriteFile(c.KwokStages, nil, 0o644))
	assert.NoError(t, c.CheckTools())
}

// Every daemon keeps its state under RunDir and its credentials in the
// PKI: two labs (two RunDirs) share nothing but the binaries.
func TestDaemonsKeepTheirStateInTheLab(t *testing.T) {
	c := ControlPlane{BinDir: "/lab/bin", RunDir: "/lab/run", Kubeconfig: "/lab/run/kubeconfig", KwokStages: "/lab/kwok-stages.yaml", PKI: pki.PKI{Dir: "/lab/run/pki"}}
	for _, d := range []struct {
		argv []string
		port int
	}{
		{c.Etcd().Argv, EtcdClientPort}, {c.APIServer().Argv, APIServerPort}, {c.ControllerManager().Argv, KubeControllerManagerPort},
		{c.Scheduler().Argv, KubeSchedulerPort}, {c.Kwok().Argv, KwokMetricsPort},
	} {
		assert.True(t, strings.HasPrefix(d.argv[0], "/lab/bin/"), d.argv[0])
		for _, a := range d.argv[1:] {
			if strings.HasPrefix(a, "/") {
				assert.True(t, strings.HasPrefix(a, "/lab/"), "%s: %s is outside the lab", d.argv[0], a)
			}
		}
	}
	assert.Contains(t, strings.Join(c.APIServer().Argv, " "), "--client-ca-file /lab/run/pki/ca.crt")
	assert.Contains(t, strings.Join(c.ControllerManager().Argv, " "), "--controllers "+Controllers)
}
