package lab

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab's list of daemons (lab status, the soak's exit check) knows the
// API server by the binary of the release it runs: a 1.36 lab's
// kube-apiserver-1.36 was once listed as a plain kube-apiserver, so the
// soak took the running API server for one that had exited.
func TestDaemonsNameTheAPIServerOfTheRelease(t *testing.T) {
	for _, minor := range []string{"1.35", "1.36"} {
		t.Run(minor, func(t *testing.T) {
			k, err := controlplane.KubeNamed(minor)
			require.NoError(t, err)
			l := &Lab{cfg: Config{Dir: t.TempDir(), Nodes: 1, Kube: k, Slurm: rootfs.Default(), Log: io.Discard}}
			var found bool
			for _, d := range l.daemons(io.Discard) {
				if d.Name == "kube-apiserver" {
					found = true
					assert.Equal(t, l.controlPlane().APIServer().Argv[0], d.Argv[0])
					assert.Equal(t, k.APIServer, d.Argv[0][len(d.Argv[0])-len(k.APIServer):])
				}
			}
			assert.True(t, found, "kube-apiserver is listed")
		})
	}
}
