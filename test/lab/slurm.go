package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/slurmcluster"
	"github.com/onepool/onepool/test/lab/slurmconf"

	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/rootfs"
)

func (l *Lab) slurmSteps() []step {
	return []step{
		{"slurm release", l.checkRelease},
		{"slurm rootfs", l.ensureRootFS},
		{"slurm config", l.configureSlurm},
		{"slurm jail", l.ensureJail},
		{"slurm daemons", l.startSlurm},
		{"slurm release noted", l.recordRelease},
		{"slurm token", l.ensureToken},
		{"dyn nodes", l.prepareDynNodes},
	}
}

func (l *Lab) slurmConfig() (slurmconf.Config, error) {
	host, err := os.Hostname()
	if err != nil {
		return slurmconf.Config{}, err
	}
	host, _, _ = strings.Cut(host, ".")
	return slurmconf.Config{ControlHost: host, Nodes: l.NodeNames(), ExtraNodes: l.ExtraNodeNames(), DynNodes: l.DynNodeNames(),
		MaxJobCount: l.cfg.MaxJobs}, nil
}

// slurm is the lab's Slurm of the release it runs (package slurmcluster).
func (l *Lab) slurm() *slurmcluster.Cluster {
	return &slurmcluster.Cluster{Root: l.RootFS(), LogDir: l.LogDir(), Procs: l.procs, API: l.cfg.Slurm.API(),
		Nodes: l.NodeNames(), RESTPort: SlurmrestdPort, Associations: labAssociations(), Log: l.cfg.Log}
}

// chrootUser returns uid and gid of user in the rootfs's /etc/passwd.
func (l *Lab) chrootUser(user string) (uint32, uint32, error) {
	return slurmcluster.ChrootUser(l.RootFS(), user)
}

// configureSlurm writes the Slurm config and makes users, keys, folders and
// fake GPUs. When slurm.conf changes under running daemons (another node
// count), they are stopped so startSlurm brings them up on the new config.
func (l *Lab) configureSlurm(ctx context.Context) error {
	root := l.RootFS()
	if err := mount.Chroot(root); err != nil {
		return err
	}
	if err := rootfs.MakeDevices(root); err != nil {
		return err
	}
	if _, _, err := l.chrootUser("slurmrest"); err != nil {
		if err := rootfs.RunLoggedIn(ctx, time.Minute, filepath.Join(l.LogDir(), "setup.log"), root,
			"useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "slurmrest"); err != nil {
			return err
		}
	}
	if err := l.ensureJailUser(ctx); err != nil {
		return err
	}
	if err := l.ensureTeamUsers(ctx); err != nil {
		return err
	}
	slurmUID, slurmGID, err := l.chrootUser("slurm")
	if err != nil {
		return err
	}
	mungeUID, mungeGID, err := l.chrootUser("munge")
	if err != nil {
		return err
	}
	for _, d := range []struct {
		path     string
		uid, gid uint32
		mode     os.FileMode
	}{
		{"var/spool/slurmctld", slurmUID, slurmGID, 0o755},
		{"var/spool/slurmd", 0, 0, 0o755},
		{"var/log/onepool", slurmUID, slurmGID, 0o777},
		{"run/munge", mungeUID, mungeGID, 0o755},
		{"var/lib/fakegpu", 0, 0, 0o755},
	} {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return err
		}
		if err := os.Chown(p, int(d.uid), int(d.gid)); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	// Slurm's own logs live in the chroot; the log folder links to them.
	if err := os.MkdirAll(l.LogDir(), 0o755); err != nil {
		return err
	}
	// The link follows the release the lab runs (each has its rootfs).
	link, target := filepath.Join(l.LogDir(), "slurm"), filepath.Join(root, "var/log/onepool")
	if cur, err := os.Readlink(link); err != nil || cur != target {
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	for i := 0; i < GPUsPerNode; i++ {
		if err := rootfs.MknodChar(filepath.Join(root, "var/lib/fakegpu", "nvidia"+strconv.Itoa(i)), 195, uint32(i), 0o666); err != nil {
			return err
		}
	}
	if err := writeFakeDriver(root); err != nil {
		return err
	}
	if err := l.ensureKey(filepath.Join(root, "etc/slurm/jwt_hs256.key"), 32, slurmUID, slurmGID); err != nil {
		return err
	}
	if err := l.ensureKey(filepath.Join(root, "etc/munge/munge.key"), 128, mungeUID, mungeGID); err != nil {
		return err
	}
	cfg, err := l.slurmConfig()
	if err != nil {
		return err
	}
	hosts := fmt.Sprintf("127.0.0.1 localhost %s %s\n::1 localhost\n", cfg.ControlHost, strings.Join(slices.Concat(cfg.Nodes, cfg.DynNodes), " "))
	oldConf, err := os.ReadFile(filepath.Join(root, "etc/slurm/slurm.conf"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	shrinks := slurmconf.QueueShrinks(string(oldConf), cfg.SlurmConf())
	changed := false
	for _, f := range []struct{ path, body string }{
		{"etc/hosts", hosts},
		{"etc/slurm/slurm.conf", cfg.SlurmConf()},
		{"etc/slurm/gres.conf", cfg.GresConf()},
		{"etc/slurm/cgroup.conf", slurmconf.CgroupConf},
	} {
		c, err := rootfs.WriteIfChanged(filepath.Join(root, f.path), f.body)
		if err != nil {
			return err
		}
		changed = changed || c
	}
	// The Epilog runs the node agent: both in place before any job ends.
	if err := l.installAgent(); err != nil {
		return err
	}
	if _, err := rootfs.WriteIfChanged(filepath.Join(root, slurmconf.ReleaseEpilogPath), slurmconf.ReleaseEpilog(AgentPath, ReleasePort)); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, slurmconf.ReleaseEpilogPath), 0o755); err != nil {
		return err
	}
	acctChanged, err := l.slurm().ConfigureAccounting(ctx, cfg)
	if err != nil {
		return err
	}
	if acctChanged {
		if err := errors.Join(l.procs.Stop("slurmdbd"), l.procs.Stop("mariadbd")); err != nil {
			return err
		}
	}
	if changed {
		// The kubelet's slurmd too: the node records they made go with the
		// saved state, and they must read the new config.
		if err := errors.Join(l.StopKubelet(), l.slurm().Stop()); err != nil {
			return err
		}
		// Nodes start from the new config, not from saved state: a saved
		// NOT_RESPONDING scale node makes slurmctld touch the node table
		// every second. Jobs keep their saved state, unless the queue
		// shrank: slurmctld would start full (a scale run's held jobs).
		saved := []string{"node_state", "node_state.old"}
		if shrinks {
			saved = append(saved, "job_state", "job_state.old")
		}
		for _, f := range saved {
			if err := os.Remove(filepath.Join(root, "var/spool/slurmctld", f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func (l *Lab) ensureKey(path string, size int, uid, gid uint32) error {
	if st, err := os.Stat(path); err == nil && st.Size() >= int64(size) {
		return nil
	}
	key := make([]byte, size)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return err
	}
	return os.Chown(path, int(uid), int(gid))
}

func (l *Lab) startSlurm(ctx context.Context) error { return l.slurm().Start(ctx) }

// StopSlurmrestd stops slurmrestd (for tests of a daemon that is down).
func (l *Lab) StopSlurmrestd() error { return l.procs.Stop("slurmrestd") }

// StartSlurmrestd starts slurmrestd again and waits until it answers.
func (l *Lab) StartSlurmrestd(ctx context.Context) error { return l.startSlurm(ctx) }

// RestartSlurmctld stops slurmctld and starts it again from its saved state.
func (l *Lab) RestartSlurmctld(ctx context.Context) error { return l.slurm().RestartSlurmctld(ctx) }

// Reconfigure runs `scontrol reconfigure`, which in 24.11 restarts
// slurmctld under a new pid, and records that pid so `lab status` and
// `lab down` keep track of it. It returns once the new slurmctld answers.
func (l *Lab) Reconfigure(ctx context.Context) error { return l.slurm().Reconfigure(ctx) }

// Slurm runs a Slurm command (scontrol, sinfo, sbatch, ...) inside the chroot
// as root, bounded by 30 s since a dead slurmctld makes them hang.
func (l *Lab) Slurm(ctx context.Context, argv ...string) ([]byte, error) {
	return l.slurm().Run(ctx, argv...)
}

// MintToken returns a new JWT for user that lives for lifespan.
func (l *Lab) MintToken(ctx context.Context, user string, lifespan time.Duration) (string, error) {
	return l.slurm().MintToken(ctx, user, lifespan)
}

// ensureToken keeps an admin token (user slurm) for onepool in TokenFile,
// renewed when it is older than half its life or than the JWT key, minted
// by the other release or refused.
func (l *Lab) ensureToken(ctx context.Context) error {
	return l.slurm().EnsureToken(ctx, slurmcluster.TokenFile{Path: l.TokenFile(), User: "slurm", Release: l.Release().Name,
		Lifetime: tokenLifetime, RenewBefore: tokenRenewBefore})
}
