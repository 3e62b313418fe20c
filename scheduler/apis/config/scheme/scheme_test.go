package scheme

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/onepool/onepool/scheduler/apis/config"
)

func TestMain(m *testing.M) {
	if err := Install(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// load reads a scheduler config file as kube-scheduler does, with the
// Onepool plugin's args as given, and returns them as the plugin gets them.
func load(t *testing.T, args string) (any, error) {
	t.Helper()
	cfg := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: onepool
  plugins:
    multiPoint: {enabled: [{name: Onepool}]}
`
	if args != "-" {
		cfg += "  pluginConfig:\n  - name: Onepool\n    args:\n" + args
	}
	f := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(f, []byte(cfg), 0o600))
	c, err := options.LoadConfigFromFile(klog.Background(), f)
	if err != nil {
		return nil, err
	}
	var pc *kubeconfig.PluginConfig
	for i := range c.Profiles[0].PluginConfig {
		if c.Profiles[0].PluginConfig[i].Name == "Onepool" {
			pc = &c.Profiles[0].PluginConfig[i]
		}
	}
	require.NotNil(t, pc, "no Onepool pluginConfig after loading")
	return pc.Args, nil
}

// The framework decodes OnepoolArgs strictly, fills the defaults and hands
// the plugin the internal version.
func TestFrameworkDecodesOnepoolArgs(t *testing.T) {
	got, err := load(t, `      apiVersion: kubescheduler.config.k8s.io/v1
      kind: OnepoolArgs
      slurmrestURL: http://slurmrestd:6820
      tokenFile: /t
      releaseURL: http://10.0.0.1:10270
      pollInterval: 2s
      staleAfter: 10s
      submitWorkers: 4
`)
	require.NoError(t, err)
	a, ok := got.(*config.OnepoolArgs)
	require.True(t, ok, "args are %T", got)
	assert.Equal(t, "http://slurmrestd:6820", a.SlurmrestURL)
	assert.Equal(t, 2*time.Second, a.PollInterval.Duration, "given")
	assert.Equal(t, 10*time.Second, a.StaleAfter.Duration, "given")
	assert.Equal(t, int32(4), a.SubmitWorkers, "given")
	assert.Equal(t, 10*time.Second, a.RequestTimeout.Duration, "default")
	assert.Equal(t, 10*time.Second, a.JobListInterval.Duration, "default")
	assert.Equal(t, 100*time.Millisecond, a.StartPollInterval.Duration, "default")
	assert.Equal(t, 250*time.Millisecond, a.WatchInterval.Duration, "default")
	assert.Equal(t, ":10270", a.ReleaseListenAddress, "default")
	assert.Equal(t, "/tmp", a.WorkDir, "default")
	assert.Zero(t, a.MaxTimeLimit.Duration, "no cap unless given")
}

func TestFrameworkOnepoolArgsOddCases(t *testing.T) {
	t.Run("without apiVersion and kind: still OnepoolArgs", func(t *testing.T) {
		got, err := load(t, "      slurmrestURL: http://s:6820\n      tokenFile: /t\n      releaseURL: http://h:1\n")
		require.NoError(t, err)
		assert.IsType(t, &config.OnepoolArgs{}, got)
	})
	t.Run("args left out: the defaults", func(t *testing.T) {
		got, err := load(t, "-")
		require.NoError(t, err)
		a, ok := got.(*config.OnepoolArgs)
		require.True(t, ok, "args are %T", got)
		assert.Equal(t, int32(16), a.SubmitWorkers)
		assert.Empty(t, a.SlurmrestURL, "required: the plugin's validation names it")
	})
	t.Run("an unknown field fails", func(t *testing.T) {
		_, err := load(t, "      slurmrestURL: http://s:6820\n      partiton: gpu\n")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "partiton")
	})
	t.Run("the old apiVersion fails, naming it", func(t *testing.T) {
		_, err := load(t, "      apiVersion: onepool.dev/v1alpha1\n      kind: OnepoolArgs\n      slurmrestURL: http://s:6820\n")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "onepool.dev/v1alpha1")
		t.Log(err)
	})
}
