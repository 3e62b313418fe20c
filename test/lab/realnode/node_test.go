package realnode

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/pki"
)

func testNode(t *testing.T) *Node {
	dir := t.TempDir()
	return &Node{Dir: filepath.Join(dir, "node"), LabDir: dir, BinDir: filepath.Join(dir, "bin"), PKI: pki.PKI{Dir: filepath.Join(dir, "pki")}, ClusterDNS: "10.96.0.10"}
}

func TestEachLabHasItsOwnCgroupAndBridge(t *testing.T) {
	a, b := testNode(t), testNode(t)
	assert.NotEqual(t, a.Cgroup(), b.Cgroup())
	assert.NotEqual(t, a.Bridge(), b.Bridge())
	assert.LessOrEqual(t, len(a.Bridge()), 15, "a Linux interface name has at most 15 bytes")
	assert.Equal(t, a.Cgroup(), (&Node{LabDir: a.LabDir}).Cgroup(), "the same lab dir, the same names")
}

func TestKubeletConfig(t *testing.T) {
	n := testNode(t)
	c := n.kubeletConfig("10.99.0.1")
	for _, want := range []string{
		"failCgroupV1: false", "cgroupRoot: /" + n.Cgroup() + "\n", "address: 10.99.0.1\n", "port: 26250\n", "healthzPort: 26248\n",
		"containerRuntimeEndpoint: unix://" + n.ContainerdSocket() + "\n", "clientCAFile: " + n.PKI.Path("ca.crt") + "\n",
		"clusterDNS: [10.96.0.10]", "anonymous:\n    enabled: false", "imageGCHighThresholdPercent: 100",
	} {
		assert.Contains(t, c, want)
	}
	d := n.kubeletDaemon("10.99.0.1")
	assert.Contains(t, strings.Join(d.Argv, " "), "--hostname-override lab-node --node-ip 10.99.0.1 --node-labels "+Label+"=true")
}

func TestRuntimeConfigStaysUnderTheNodesDir(t *testing.T) {
	n := testNode(t)
	var cni struct {
		Plugins []struct {
			Bridge string
			IPAM   struct {
				Ranges  [][]struct{ Subnet string }
				DataDir string
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(n.cniConfig()), &cni), "the CNI config is JSON")
	require.Len(t, cni.Plugins, 1)
	assert.Equal(t, n.Bridge(), cni.Plugins[0].Bridge)
	assert.Equal(t, podSubnet, cni.Plugins[0].IPAM.Ranges[0][0].Subnet)
	assert.True(t, strings.HasPrefix(cni.Plugins[0].IPAM.DataDir, n.Dir+"/"))
	c := n.containerdConfig()
	for _, k := range []string{"root", "state"} {
		assert.Contains(t, c, k+` = "`+filepath.Join(n.Dir, "containerd", k)+`"`)
	}
	assert.Contains(t, c, `sandbox_image = "`+PauseImage+`"`)
	assert.Contains(t, c, `cdi_spec_dirs = ["`+n.CDIDir()+`"]`)
	assert.Contains(t, c, "restrict_oom_score_adj = true")
}

func TestParseCgroupMounts(t *testing.T) {
	mi := `25 30 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
28 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
29 25 0:27 / /sys/fs/cgroup/my\040group rw - cgroup cgroup rw,memory
40 25 0:27 / /sys/fs/cgroup/my\040group rw - cgroup cgroup rw,memory
31 30 0:29 / /proc rw - proc proc rw`
	assert.Equal(t, []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/my group"}, parseCgroupMounts(mi))
}

func TestIPOverride(t *testing.T) {
	n := testNode(t)
	n.IPOverride = "10.99.0.7"
	ip, err := n.IP()
	require.NoError(t, err)
	assert.Equal(t, "10.99.0.7", ip)
	n.IPOverride = "not-an-ip"
	_, err = n.IP()
	assert.ErrorContains(t, err, "not an IP address")
}

func TestRefs(t *testing.T) {
	for _, tc := range []struct{ ref, repo, tag, normal string }{
		{"onepool/controller-manager:13a76b8", "onepool/controller-manager", "13a76b8", "docker.io/onepool/controller-manager:13a76b8"},
		{"busybox:1.36", "busybox", "1.36", "docker.io/library/busybox:1.36"},
		{"localhost/onepool-lab/pause:3.10", "localhost/onepool-lab/pause", "3.10", "localhost/onepool-lab/pause:3.10"},
		{"registry.example:5000/team/app", "registry.example:5000/team/app", "latest", "registry.example:5000/team/app"},
	} {
		repo, tag := splitRef(tc.ref)
		assert.Equal(t, [2]string{tc.repo, tc.tag}, [2]string{repo, tag}, tc.ref)
		assert.Equal(t, tc.normal, normalizeRef(tc.ref), tc.ref)
	}
}

func TestImagesNamesArchivesAsPodsAskForThem(t *testing.T) {
	n := testNode(t)
	n.ImageDir = t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	idx := `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"onepool/scheduler:abc"}}]}`
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "index.json", Mode: 0o644, Size: int64(len(idx)), Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte(idx))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(n.ImageDir, "scheduler.tar"), buf.Bytes(), 0o644))
	im, err := n.Image("scheduler")
	require.NoError(t, err)
	assert.Equal(t, "onepool/scheduler:abc", im.Ref)
	assert.Equal(t, []string{"docker.io/onepool/scheduler:abc", "localhost/onepool/scheduler:abc", "localhost/onepool/scheduler:lab"}, im.Names)
	_, err = n.Image("agent")
	assert.ErrorContains(t, err, "run `make images`")
	require.NoError(t, os.WriteFile(filepath.Join(n.ImageDir, "broken.tar"), []byte("not a tar"), 0o644))
	_, err = n.Images()
	assert.ErrorContains(t, err, "broken.tar")
}

func TestPauseArchiveIsTheSameForTheSameBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	require.NoError(t, os.WriteFile(bin, []byte("\x7fELF pause"), 0o755))
	a, err := pauseArchive(bin)
	require.NoError(t, err)
	b, err := pauseArchive(bin)
	require.NoError(t, err)
	assert.Equal(t, a, b, "containerd imports it again only when it changed")
	tr := tar.NewReader(bytes.NewReader(a))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Name == "manifest.json" {
			var m []struct{ RepoTags []string }
			require.NoError(t, json.NewDecoder(tr).Decode(&m))
			assert.Equal(t, []string{PauseImage}, m[0].RepoTags)
		}
	}
	assert.Equal(t, []string{"config.json", "layer.tar", "manifest.json"}, names)
}

func TestZombie(t *testing.T) {
	assert.False(t, zombie(os.Getpid()), "this test runs")
	assert.True(t, zombie(1<<30), "a pid that does not exist counts as gone")
}
