package lab

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKubeletNode(t *testing.T) {
	n, err := kubeletNode("dyn-3")
	require.NoError(t, err)
	assert.Subset(t, n.Env, []string{"ONEPOOL_SLURMD_PORT=26953", "ONEPOOL_GPU_INVENTORY=/etc/onepool/fake-gpus.json",
		"ONEPOOL_CONF_DIR=/run/onepool/dyn-3/slurm", "ONEPOOL_STATE_DIR=/run/onepool/dyn-3", "KUBECONFIG=/etc/onepool/kubeconfig"})
	assert.Equal(t, []string{"/run/onepool/dyn-3/slurm"}, n.Dirs)
	_, err = kubeletNode("gpu-0")
	assert.ErrorContains(t, err, "no dynamic lab node")
}

func TestInstallAgent(t *testing.T) {
	l := &Lab{cfg: Config{Dir: t.TempDir(), Log: io.Discard}}
	if err := l.installAgent(); err != nil { // not built: skipped, no error
		t.Fatal(err)
	}
	dst := filepath.Join(l.RootFS(), AgentPath)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("installed without a binary: %v", err)
	}
	for _, body := range []string{"v1", "v2"} {
		if err := os.MkdirAll(l.BinDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(l.BinDir(), "onepool-node-agent"), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := l.installAgent(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		st, _ := os.Stat(dst)
		if err != nil || string(got) != body || st.Mode().Perm() != 0o755 {
			t.Errorf("installed %q mode %v (%v), want %q 0755", got, st.Mode(), err, body)
		}
	}
}
