package slurmcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

func TestNodesResponding(t *testing.T) {
	for _, tc := range []struct {
		name, sinfo, err string
	}{
		{"all up", "gpu-0 idle\ngpu-1 allocated\ngpu-2 drained\n", ""},
		{"one not listed", "gpu-0 idle\ngpu-1 idle\n", "node gpu-2 not in sinfo"},
		{"one not responding", "gpu-0 idle\ngpu-1 idle*\ngpu-2 idle\n", "node gpu-1 is idle*"},
		{"one down", "gpu-0 down\ngpu-1 idle\ngpu-2 idle\n", "node gpu-0 is down"},
		{"one unknown", "gpu-0 idle\ngpu-1 idle\ngpu-2 unknown\n", "node gpu-2 is unknown"},
		{"one invalid", "gpu-0 idle\ngpu-1 inval\ngpu-2 idle\n", "node gpu-1 is inval"},
		{"nothing", "", "node gpu-0 not in sinfo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NodesResponding([]byte(tc.sinfo), []string{"gpu-0", "gpu-1", "gpu-2"})
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tc.err)
			}
		})
	}
}

func TestAssociationRowIsWhatSacctmgrPrints(t *testing.T) {
	a := Association{User: "team-a", Account: "team-a", QOS: []string{"normal", "high", "low"}, DefaultQOS: "normal"}
	assert.Equal(t, "team-a|team-a|team-a|high,low,normal|normal", a.row(), "sacctmgr lists QOS sorted")
	assert.Equal(t, []string{"normal", "high", "low"}, a.QOS, "the caller's order is left alone")
}

func TestChrootUser(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nmunge:x:101:102::/nonexistent:/usr/sbin/nologin\nbad:x:y:1::/:/bin/sh\n"), 0o644))
	uid, gid, err := ChrootUser(root, "munge")
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{101, 102}, [2]uint32{uid, gid})
	_, _, err = ChrootUser(root, "alice")
	assert.ErrorContains(t, err, "no user alice")
	_, _, err = ChrootUser(root, "bad")
	assert.ErrorContains(t, err, "passwd entry of bad")
}

func TestDaemonsStartInOrderSlurmrestdLast(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("munge:x:101:102::/:/bin/false\nmysql:x:103:104::/:/bin/false\n"), 0o644))
	c := &Cluster{Root: root, Procs: proc.Supervisor{PidDir: t.TempDir(), LogDir: t.TempDir()}, Nodes: []string{"gpu-0", "gpu-1"}, RESTPort: 26820}
	ds, err := c.Daemons()
	require.NoError(t, err)
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		assert.Equal(t, root, d.Chroot, "%s runs in the chroot", d.Name)
	}
	assert.Equal(t, []string{"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-gpu-0", "slurmd-gpu-1", "slurmrestd"}, names)
	assert.Equal(t, uint32(101), ds[0].UID, "munged runs as munge")
	assert.Equal(t, uint32(103), ds[1].UID, "MariaDB runs as mysql")
	assert.Equal(t, slurmconf.SlurmdPortBase+1, ds[5].Port)
	assert.Contains(t, ds[6].Argv, "127.0.0.1:26820")
	assert.Contains(t, ds[6].Env, "SLURM_JWT=daemon")
}
