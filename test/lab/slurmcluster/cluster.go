// Package slurmcluster is the lab's Slurm: real daemons from Debian's
// packages running in the Slurm chroot (package rootfs) — munged, MariaDB,
// slurmdbd, slurmctld, one slurmd per static node (-N name) and slurmrestd —
// started in order, each awaited with a bound, plus the accounting they need
// (cluster, accounts, users, QOS) and the commands and tokens tests use.
// What Slurm is told (slurm.conf, gres.conf, ...) is package slurmconf;
// which users, keys and nodes exist is the lab's. See its README.
package slurmcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// Cluster is one release's Slurm in the lab.
type Cluster struct {
	// Root is the Slurm chroot; its daemons' own logs are in
	// <Root>/var/log/onepool, linked from LogDir/slurm.
	Root, LogDir string
	// Procs starts, awaits and stops the daemons.
	Procs proc.Supervisor
	// API is the release's REST API version (v0.0.41, ...).
	API string
	// Nodes are the static nodes, each with a slurmd of its own.
	Nodes []string
	// RESTPort is where slurmrestd listens on 127.0.0.1.
	RESTPort int
	// Associations are the users the accounting must hold, beyond the
	// cluster and the QOS of slurmconf.LabQOS.
	Associations []Association
	// Log gets a line for each slow first start.
	Log io.Writer
}

// commandTimeout bounds each Slurm command: a dead slurmctld makes them hang.
const commandTimeout = 30 * time.Second

// RESTURL is slurmrestd's URL.
func (c *Cluster) RESTURL() string { return fmt.Sprintf("http://127.0.0.1:%d", c.RESTPort) }

// Run runs a Slurm command (scontrol, sinfo, sbatch, ...) inside the chroot
// as root, bounded by 30 s.
func (c *Cluster) Run(ctx context.Context, argv ...string) ([]byte, error) {
	return rootfs.Output(ctx, commandTimeout, c.Root, nil, argv...)
}

// slurmctldArgv: slurmctld goes on past state files it cannot read (-i),
// as the slurm chart's image runs it. Slurm 26.05 otherwise refuses to
// start after a SIGKILL that came before its first save of a state file
// ("fatal: No Assoc usage file ... to recover": the 26.05 soak), or with
// job state but no node state (the lab removes the saved node state when
// the config changes); 24.11 went on by itself.
var slurmctldArgv = []string{"/usr/sbin/slurmctld", "-D", "-i"}

// Daemons are the daemons Start runs, in order, slurmrestd last.
func (c *Cluster) Daemons() ([]proc.Daemon, error) {
	mungeUID, mungeGID, err := ChrootUser(c.Root, "munge")
	if err != nil {
		return nil, err
	}
	ds := []proc.Daemon{
		{Name: "munged", Argv: []string{"/usr/sbin/munged", "-F", "--num-threads=4"}, Chroot: c.Root, UID: mungeUID, GID: mungeGID, Env: rootfs.Env()},
	}
	db, err := c.mariadb()
	if err != nil {
		return nil, err
	}
	ds = append(ds, db, c.slurmdbd(),
		proc.Daemon{Name: "slurmctld", Argv: slurmctldArgv, Chroot: c.Root, Port: slurmconf.SlurmctldPort, Env: rootfs.Env()})
	for i, n := range c.Nodes {
		ds = append(ds, proc.Daemon{Name: "slurmd-" + n, Argv: []string{"/usr/sbin/slurmd", "-D", "-N", n}, Chroot: c.Root, Port: slurmconf.SlurmdPortBase + i, Env: rootfs.Env()})
	}
	return append(ds, c.Slurmrestd()), nil
}

// Slurmrestd is the slurmrestd daemon: JWT auth, the slurmctld plugin.
func (c *Cluster) Slurmrestd() proc.Daemon {
	return proc.Daemon{
		Name: "slurmrestd",
		Argv: []string{"/usr/sbin/slurmrestd", "-u", "slurmrest", "-g", "slurmrest", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld",
			fmt.Sprintf("127.0.0.1:%d", c.RESTPort)},
		Chroot: c.Root, Port: c.RESTPort,
		// Compact JSON: a job's record is 9.8 KB instead of 27 KB pretty
		// (Slurm 24.11), and the scheduler reads many.
		Env: append([]string{"SLURM_JWT=daemon", "SLURMRESTD_JSON=compact"}, rootfs.Env()...),
	}
}

// Start starts whatever of the daemons is not running, in order, each
// awaited (bounded) before the next: slurmctld must find slurmdbd with the
// accounting in it, slurmrestd comes once every static node's slurmd has
// registered.
func (c *Cluster) Start(ctx context.Context) error {
	ds, err := c.Daemons()
	if err != nil {
		return err
	}
	ds, rest := ds[:len(ds)-1], ds[len(ds)-1]
	logs := filepath.Join(c.LogDir, "slurm")
	for _, d := range ds {
		if d.Name == "slurmdbd" && c.Procs.Running(d) == 0 {
			// Its database user, before the first start (and again on any, cheaply).
			if err := c.ensureDBUser(ctx); err != nil {
				return err
			}
		}
		wasRunning := c.Procs.Running(d) != 0
		started := time.Now()
		if _, err := c.Procs.Start(d); err != nil {
			return err
		}
		switch d.Name {
		case "mariadbd":
			err = c.Procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "mariadb.log"), c.mariadbReady)
		case "slurmdbd":
			// slurmctld must find slurmdbd with the cluster, users and QOS in it.
			err = c.Procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "slurmdbd.log"), c.slurmdbdReady)
			if err == nil {
				err = c.ensureAccounting(ctx)
			}
		case "munged":
			sock := filepath.Join(c.Root, "run/munge/munge.socket.2")
			err = c.Procs.Await(ctx, d, 20*time.Second, filepath.Join(c.LogDir, "munged.out"), func(context.Context) error {
				_, err := os.Stat(sock)
				return err
			})
		case "slurmctld":
			err = c.Procs.Await(ctx, d, 60*time.Second, filepath.Join(logs, "slurmctld.log"), c.ping)
		}
		if err != nil {
			return err
		}
		if !wasRunning && (d.Name == "mariadbd" || d.Name == "slurmdbd") {
			fmt.Fprintf(c.Log, "lab:   %-16s ready in %s\n", d.Name, time.Since(started).Round(10*time.Millisecond))
		}
	}
	if err := proc.WaitFor(ctx, "slurmd on every GPU node", 90*time.Second, logs, c.nodesResponding); err != nil {
		return err
	}
	if _, err := c.Procs.Start(rest); err != nil {
		return err
	}
	return c.Procs.Await(ctx, rest, 30*time.Second, filepath.Join(c.LogDir, "slurmrestd.out"), func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RESTURL()+"/slurm/"+c.API+"/ping/", nil)
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

// ping is nil once slurmctld answers `scontrol ping` with UP.
func (c *Cluster) ping(ctx context.Context) error {
	out, err := c.Run(ctx, "scontrol", "ping")
	if err == nil && !bytes.Contains(out, []byte("UP")) {
		err = fmt.Errorf("scontrol ping: %s", bytes.TrimSpace(out))
	}
	return err
}

// nodesResponding is nil once slurmctld hears from every static node's slurmd.
func (c *Cluster) nodesResponding(ctx context.Context) error {
	out, err := c.Run(ctx, "sinfo", "-h", "-N", "-p", slurmconf.Partition, "-o", "%N %T")
	if err != nil {
		return err
	}
	return NodesResponding(out, c.Nodes)
}

// NodesResponding reads `sinfo -h -N -o "%N %T"`: nil when every node of
// want is listed and neither not responding (*), down, unknown nor invalid.
func NodesResponding(sinfo []byte, want []string) error {
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sinfo)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			seen[f[0]] = f[1]
		}
	}
	for _, n := range want {
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

// Stop stops slurmrestd, every slurmd (those of nodes an earlier config
// had too) and slurmctld; munged and the accounting keep running.
func (c *Cluster) Stop() error {
	var errs []error
	errs = append(errs, c.Procs.Stop("slurmrestd"))
	for _, n := range c.Nodes {
		errs = append(errs, c.Procs.Stop("slurmd-"+n))
	}
	errs = append(errs, c.Procs.Stop("slurmctld"))
	// slurmd of nodes a previous config had (more nodes than now).
	matches, _ := filepath.Glob(c.Procs.PidFile("slurmd-*"))
	for _, m := range matches {
		errs = append(errs, c.Procs.Stop(strings.TrimSuffix(filepath.Base(m), ".pid")))
	}
	return errors.Join(errs...)
}

// RestartSlurmctld stops slurmctld and starts it again from its saved state.
func (c *Cluster) RestartSlurmctld(ctx context.Context) error {
	if err := c.Procs.Stop("slurmctld"); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Reconfigure runs `scontrol reconfigure`, which in 24.11 restarts
// slurmctld under a new pid, and records that pid so the lab keeps track of
// it. It returns once the new slurmctld answers.
func (c *Cluster) Reconfigure(ctx context.Context) error {
	if out, err := c.Run(ctx, "scontrol", "reconfigure"); err != nil {
		return fmt.Errorf("scontrol reconfigure: %w: %s", err, bytes.TrimSpace(out))
	}
	logPath := filepath.Join(c.LogDir, "slurm", "slurmctld.log")
	return proc.WaitFor(ctx, "slurmctld after reconfigure", 10*time.Minute, logPath, func(ctx context.Context) error {
		out, err := c.Run(ctx, "scontrol", "ping")
		if err != nil || !bytes.Contains(out, []byte("UP")) {
			return fmt.Errorf("scontrol ping: %v %s", err, bytes.TrimSpace(out))
		}
		pids := proc.ChrootedPids(c.Root, "slurmctld")
		if len(pids) != 1 {
			return fmt.Errorf("%d slurmctld processes in the rootfs", len(pids))
		}
		return os.WriteFile(c.Procs.PidFile("slurmctld"), []byte(fmt.Sprintf("%d slurmctld\n", pids[0])), 0o644)
	})
}
