package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/slurmconf"

	"github.com/onepool/onepool/test/lab/mount"
	"github.com/onepool/onepool/test/lab/proc"
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
	return slurmconf.Config{ControlHost: host, Nodes: l.NodeNames(), ExtraNodes: l.ExtraNodeNames(), DynNodes: l.DynNodeNames()}, nil
}

// chrootUser returns uid and gid of user in the rootfs's /etc/passwd.
func (l *Lab) chrootUser(user string) (uint32, uint32, error) {
	f, err := os.Open(filepath.Join(l.RootFS(), "etc/passwd"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) >= 4 && p[0] == user {
			uid, err1 := strconv.ParseUint(p[2], 10, 32)
			gid, err2 := strconv.ParseUint(p[3], 10, 32)
			if err := errors.Join(err1, err2); err != nil {
				return 0, 0, fmt.Errorf("passwd entry of %s: %w", user, err)
			}
			return uint32(uid), uint32(gid), nil
		}
	}
	return 0, 0, fmt.Errorf("no user %s in the lab rootfs", user)
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
	changed := false
	for _, f := range []struct{ path, body string }{
		{"etc/hosts", hosts},
		{"etc/slurm/slurm.conf", cfg.SlurmConf()},
		{"etc/slurm/gres.conf", cfg.GresConf()},
		{"etc/slurm/cgroup.conf", slurmconf.CgroupConf},
	} {
		c, err := writeIfChanged(filepath.Join(root, f.path), f.body)
		if err != nil {
			return err
		}
		changed = changed || c
	}
	// The Epilog runs the node agent: both in place before any job ends.
	if err := l.installAgent(); err != nil {
		return err
	}
	if _, err := writeIfChanged(filepath.Join(root, slurmconf.ReleaseEpilogPath), slurmconf.ReleaseEpilog(AgentPath, ReleasePort)); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, slurmconf.ReleaseEpilogPath), 0o755); err != nil {
		return err
	}
	acctChanged, err := l.configureAccounting(ctx, cfg)
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
		if err := errors.Join(l.StopKubelet(), l.stopSlurm()); err != nil {
			return err
		}
		// Nodes start from the new config, not from saved state: a saved
		// NOT_RESPONDING scale node makes slurmctld touch the node table
		// every second. Jobs keep their saved state.
		for _, f := range []string{"node_state", "node_state.old"} {
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

func writeIfChanged(path, body string) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == body {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	return true, os.WriteFile(path, []byte(body), 0o644)
}

// slurmctldArgv: slurmctld goes on past state files it cannot read (-i),
// as the slurm chart's image runs it. Slurm 26.05 otherwise refuses to
// start after a SIGKILL that came before its first save of a state file
// ("fatal: No Assoc usage file ... to recover": the 26.05 soak), or with
// job state but no node state (the lab removes the saved node state when
// the config changes); 24.11 went on by itself.
func (l *Lab) slurmctldArgv() []string {
	return []string{"/usr/sbin/slurmctld", "-D", "-i"}
}

func (l *Lab) slurmDaemons() ([]daemon, error) {
	root := l.RootFS()
	mungeUID, mungeGID, err := l.chrootUser("munge")
	if err != nil {
		return nil, err
	}
	ds := []daemon{
		{Name: "munged", Argv: []string{"/usr/sbin/munged", "-F", "--num-threads=4"}, Chroot: root, UID: mungeUID, GID: mungeGID, Env: rootfs.Env()},
	}
	db, err := l.mariadb()
	if err != nil {
		return nil, err
	}
	ds = append(ds, db, l.slurmdbd(),
		daemon{Name: "slurmctld", Argv: l.slurmctldArgv(), Chroot: root, Port: SlurmctldPort, Env: rootfs.Env()})
	for i, n := range l.NodeNames() {
		ds = append(ds, daemon{Name: "slurmd-" + n, Argv: []string{"/usr/sbin/slurmd", "-D", "-N", n}, Chroot: root, Port: SlurmdPortBase + i, Env: rootfs.Env()})
	}
	return ds, nil
}

func (l *Lab) slurmrestd() daemon {
	return daemon{
		Name: "slurmrestd",
		Argv: []string{"/usr/sbin/slurmrestd", "-u", "slurmrest", "-g", "slurmrest", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld",
			fmt.Sprintf("127.0.0.1:%d", SlurmrestdPort)},
		Chroot: l.RootFS(), Port: SlurmrestdPort,
		// Compact JSON: a job's record is 9.8 KB instead of 27 KB pretty
		// (Slurm 24.11), and the scheduler reads many.
		Env: append([]string{"SLURM_JWT=daemon", "SLURMRESTD_JSON=compact"}, rootfs.Env()...),
	}
}

func (l *Lab) startSlurm(ctx context.Context) error {
	ds, err := l.slurmDaemons()
	if err != nil {
		return err
	}
	logs := filepath.Join(l.LogDir(), "slurm")
	for _, d := range ds {
		if d.Name == "slurmdbd" && l.procs.Running(d) == 0 {
			// Its database user, before the first start (and again on any, cheaply).
			if err := l.ensureDBUser(ctx); err != nil {
				return err
			}
		}
		wasRunning := l.procs.Running(d) != 0
		started := time.Now()
		if _, err := l.procs.Start(d); err != nil {
			return err
		}
		switch d.Name {
		case "mariadbd":
			err = l.procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "mariadb.log"), l.mariadbReady)
		case "slurmdbd":
			// slurmctld must find slurmdbd with the cluster, users and QOS in it.
			err = l.procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "slurmdbd.log"), l.slurmdbdReady)
			if err == nil {
				err = l.ensureAccounting(ctx)
			}
		case "munged":
			sock := filepath.Join(l.RootFS(), "run/munge/munge.socket.2")
			err = l.procs.Await(ctx, d, 20*time.Second, filepath.Join(l.LogDir(), "munged.out"), func(context.Context) error {
				_, err := os.Stat(sock)
				return err
			})
		case "slurmctld":
			err = l.procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "slurmctld.log"), func(ctx context.Context) error {
				out, err := l.Slurm(ctx, "scontrol", "ping")
				if err == nil && !bytes.Contains(out, []byte("UP")) {
					err = fmt.Errorf("scontrol ping: %s", bytes.TrimSpace(out))
				}
				return err
			})
		}
		if err != nil {
			return err
		}
		if !wasRunning && (d.Name == "mariadbd" || d.Name == "slurmdbd") {
			fmt.Fprintf(l.cfg.Log, "lab:   %-16s ready in %s\n", d.Name, time.Since(started).Round(10*time.Millisecond))
		}
	}
	if err := proc.WaitFor(ctx, "slurmd on every GPU node", 90*time.Second, logs, l.nodesResponding); err != nil {
		return err
	}
	rest := l.slurmrestd()
	if _, err := l.procs.Start(rest); err != nil {
		return err
	}
	return l.procs.Await(ctx, rest, 30*time.Second, filepath.Join(l.LogDir(), "slurmrestd.out"), func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.RESTURL()+"/slurm/"+l.cfg.Slurm.API()+"/ping/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		// Without a token 24.11 answers 401: slurmrestd is up, which is all this asks.
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("GET /ping/: HTTP %d", resp.StatusCode)
		}
		return nil
	})
}

// nodesResponding is nil once slurmctld hears from every GPU node's slurmd.
func (l *Lab) nodesResponding(ctx context.Context) error {
	out, err := l.Slurm(ctx, "sinfo", "-h", "-N", "-p", Partition, "-o", "%N %T")
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			seen[f[0]] = f[1]
		}
	}
	for _, n := range l.NodeNames() {
		st, ok := seen[n]
		if !ok {
			return fmt.Errorf("node %s not in sinfo", n)
		}
		if strings.HasSuffix(st, "*") || strings.HasPrefix(st, "down") || strings.HasPrefix(st, "unknown") || strings.HasPrefix(st, "inval") {
			return fmt.Errorf("node %s is %s", n, st)
		}
	}
	return nil
}

func (l *Lab) stopSlurm() error {
	var errs []error
	errs = append(errs, l.procs.Stop("slurmrestd"))
	for _, n := range l.NodeNames() {
		errs = append(errs, l.procs.Stop("slurmd-"+n))
	}
	errs = append(errs, l.procs.Stop("slurmctld"))
	// slurmd of nodes a previous config had (more nodes than now).
	matches, _ := filepath.Glob(l.procs.PidFile("slurmd-*"))
	for _, m := range matches {
		errs = append(errs, l.procs.Stop(strings.TrimSuffix(filepath.Base(m), ".pid")))
	}
	return errors.Join(errs...)
}

// StopSlurmrestd stops slurmrestd (for tests of a daemon that is down).
func (l *Lab) StopSlurmrestd() error { return l.procs.Stop("slurmrestd") }

// StartSlurmrestd starts slurmrestd again and waits until it answers.
func (l *Lab) StartSlurmrestd(ctx context.Context) error { return l.startSlurm(ctx) }

// RestartSlurmctld stops slurmctld and starts it again from its saved state.
func (l *Lab) RestartSlurmctld(ctx context.Context) error {
	if err := l.procs.Stop("slurmctld"); err != nil {
		return err
	}
	return l.startSlurm(ctx)
}

// Reconfigure runs `scontrol reconfigure`, which in 24.11 restarts
// slurmctld under a new pid, and records that pid so `lab status` and
// `lab down` keep track of it. It returns once the new slurmctld answers.
func (l *Lab) Reconfigure(ctx context.Context) error {
	if out, err := l.Slurm(ctx, "scontrol", "reconfigure"); err != nil {
		return fmt.Errorf("scontrol reconfigure: %w: %s", err, bytes.TrimSpace(out))
	}
	logPath := filepath.Join(l.LogDir(), "slurm", "slurmctld.log")
	return proc.WaitFor(ctx, "slurmctld after reconfigure", 10*time.Minute, logPath, func(ctx context.Context) error {
		out, err := l.Slurm(ctx, "scontrol", "ping")
		if err != nil || !bytes.Contains(out, []byte("UP")) {
			return fmt.Errorf("scontrol ping: %v %s", err, bytes.TrimSpace(out))
		}
		pids := proc.ChrootedPids(l.RootFS(), "slurmctld")
		if len(pids) != 1 {
			return fmt.Errorf("%d slurmctld processes in the rootfs", len(pids))
		}
		return os.WriteFile(l.procs.PidFile("slurmctld"), []byte(fmt.Sprintf("%d slurmctld\n", pids[0])), 0o644)
	})
}

// Slurm runs a Slurm command (scontrol, sinfo, sbatch, ...) inside the chroot
// as root, bounded by 30 s since a dead slurmctld makes them hang.
func (l *Lab) Slurm(ctx context.Context, argv ...string) ([]byte, error) {
	return rootfs.Output(ctx, 30*time.Second, l.RootFS(), nil, argv...)
}

// MintToken returns a new JWT for user that lives for lifespan.
func (l *Lab) MintToken(ctx context.Context, user string, lifespan time.Duration) (string, error) {
	secs := int(lifespan / time.Second)
	if secs < 1 {
		secs = 1
	}
	out, err := l.Slurm(ctx, "scontrol", "token", "username="+user, "lifespan="+strconv.Itoa(secs))
	if err != nil {
		return "", errors.New("scontrol token failed") // the output may hold a token; never echo it
	}
	tok, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "SLURM_JWT=")
	if !ok || tok == "" {
		return "", errors.New("scontrol token printed no SLURM_JWT=")
	}
	return tok, nil
}

// tokenRefused says whether slurmrestd refuses TokenFile's token (HTTP 401
// or 511): a test that spoiled it (the fault soak) may have died before it
// put a good one back. Anything else (slurmrestd not up yet) is no refusal.
func (l *Lab) tokenRefused(ctx context.Context) bool {
	tok, err := os.ReadFile(l.TokenFile())
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.RESTURL()+"/slurm/"+l.cfg.Slurm.API()+"/jobs/state/", nil)
	if err != nil {
		return false
	}
	req.Header.Set("X-SLURM-USER-TOKEN", strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == 511
}

// ensureToken keeps an admin token for onepool in TokenFile, renewed when it
// is older than half its life or than the JWT key (a rebuilt rootfs has a
// new key, which the old token does not match).
func (l *Lab) ensureToken(ctx context.Context) error {
	st, err := os.Stat(l.TokenFile())
	key, kerr := os.Stat(filepath.Join(l.RootFS(), "etc/slurm/jwt_hs256.key"))
	// Each release's rootfs has its own JWT key: a token minted by the
	// other one is refused (HTTP 511) whatever its age.
	minted, _ := os.ReadFile(l.TokenFile() + ".release")
	if err == nil && kerr == nil && time.Since(st.ModTime()) < tokenLifetime-tokenRenewBefore && st.ModTime().After(key.ModTime()) &&
		strings.TrimSpace(string(minted)) == l.Release().Name && !l.tokenRefused(ctx) {
		return nil
	}
	tok, err := l.MintToken(ctx, "slurm", tokenLifetime)
	if err != nil {
		return err
	}
	tmp := l.TokenFile() + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.TokenFile()); err != nil {
		return err
	}
	return os.WriteFile(l.TokenFile()+".release", []byte(l.Release().Name+"\n"), 0o644)
}
