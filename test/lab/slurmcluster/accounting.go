package slurmcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// Accounting: MariaDB and slurmdbd in the chroot (their config: package
// slurmconf), so Slurm has associations and QOS, and preempt/qos can work.

// Association is a Slurm user's association in an account, with the QOS it
// may use and its default QOS; Account is made when missing.
type Association struct {
	User, Account string
	QOS           []string
	DefaultQOS    string
}

// row is the association as `sacctmgr -P list user withassoc
// format=user,defaultaccount,account,qos,defaultqos` prints it when it is
// right (QOS sorted).
func (a Association) row() string {
	qos := slices.Clone(a.QOS)
	slices.Sort(qos)
	return strings.Join([]string{a.User, a.Account, a.Account, strings.Join(qos, ","), a.DefaultQOS}, "|")
}

func (c *Cluster) mariadb() (proc.Daemon, error) {
	uid, gid, err := ChrootUser(c.Root, "mysql")
	if err != nil {
		return proc.Daemon{}, err
	}
	return proc.Daemon{Name: "mariadbd", Argv: []string{"/usr/sbin/mariadbd", "--defaults-file=" + slurmconf.MariaDBConfPath},
		Chroot: c.Root, Port: slurmconf.MariaDBPort, UID: uid, GID: gid, Env: rootfs.Env()}, nil
}

func (c *Cluster) slurmdbd() proc.Daemon {
	return proc.Daemon{Name: "slurmdbd", Argv: []string{"/usr/sbin/slurmdbd", "-D"}, Chroot: c.Root, Port: slurmconf.SlurmdbdPort, Env: rootfs.Env()}
}

// ConfigureAccounting writes MariaDB's and slurmdbd's config and makes the
// database folder once. It says whether a config changed (the daemons must
// then restart).
func (c *Cluster) ConfigureAccounting(ctx context.Context, cfg slurmconf.Config) (bool, error) {
	root := c.Root
	mysqlUID, mysqlGID, err := ChrootUser(c.Root, "mysql")
	if err != nil {
		return false, err
	}
	slurmUID, slurmGID, err := ChrootUser(c.Root, "slurm")
	if err != nil {
		return false, err
	}
	run := filepath.Join(root, slurmconf.MariaDBRunDir)
	if err := os.MkdirAll(run, 0o755); err != nil {
		return false, err
	}
	if err := os.Chown(run, int(mysqlUID), int(mysqlGID)); err != nil {
		return false, err
	}
	pass, err := ensureSecret(filepath.Join(root, slurmconf.DBDPassPath), slurmUID, slurmGID)
	if err != nil {
		return false, err
	}
	c1, err := rootfs.WriteIfChanged(filepath.Join(root, slurmconf.MariaDBConfPath), slurmconf.MariaDBConf())
	if err != nil {
		return false, err
	}
	// slurmdbd refuses a config others can read: it holds the DB password.
	c2, err := rootfs.WriteFileAs(filepath.Join(root, slurmconf.SlurmdbdConfPath), cfg.SlurmdbdConf(pass), 0o600, slurmUID, slurmGID)
	if err != nil {
		return false, err
	}
	if err := c.initMariaDB(ctx); err != nil {
		return false, err
	}
	return c1 || c2, nil
}

// initMariaDB makes the data folder with mariadb-install-db once. It is made
// in a sibling folder and renamed when complete.
func (c *Cluster) initMariaDB(ctx context.Context) error {
	root := c.Root
	data := filepath.Join(root, slurmconf.MariaDBDataDir)
	if _, err := os.Stat(filepath.Join(data, "mysql")); err == nil {
		return nil
	}
	tmp := slurmconf.MariaDBDataDir + ".tmp"
	if err := os.RemoveAll(filepath.Join(root, tmp)); err != nil {
		return err
	}
	start := time.Now()
	err := rootfs.RunLoggedIn(ctx, 2*time.Minute, filepath.Join(c.LogDir, "mariadb-install-db.log"), root,
		"mariadb-install-db", "--defaults-file="+slurmconf.MariaDBConfPath, "--user=mysql", "--datadir="+tmp,
		"--auth-root-authentication-method=socket", "--skip-test-db")
	if err != nil {
		return err
	}
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(root, tmp), data); err != nil {
		return err
	}
	fmt.Fprintf(c.Log, "lab: mariadb data folder made in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// mariadbReady is nil once MariaDB answers on its socket.
func (c *Cluster) mariadbReady(ctx context.Context) error {
	_, err := rootfs.Output(ctx, 5*time.Second, c.Root, nil, "mariadb-admin", "--defaults-file="+slurmconf.MariaDBConfPath, "ping")
	return err
}

// ensureDBUser gives slurmdbd its database and user (root logs in by socket).
//
// The database is made here, not by slurmdbd. When it is missing, slurmdbd
// creates it on another connection and calls mysql_real_connect again on the
// handle whose first connect failed with "Unknown database"; MariaDB
// Connector/C 3.4.10 (trixie's libmariadb3 1:11.8.9) leaves that handle
// unable to read any result set ("5027 Number of columns in result (=1) ...
// exceeds maximum allowed number of columns (=0)"), and slurmdbd dies in
// _check_mysql_concat_is_sane. With the database in place slurmdbd never
// takes that path, whatever the client library's version; it is also what
// Slurm's accounting guide has admins do.
func (c *Cluster) ensureDBUser(ctx context.Context) error {
	pass, err := os.ReadFile(filepath.Join(c.Root, slurmconf.DBDPassPath))
	if err != nil {
		return err
	}
	p := strings.TrimSpace(string(pass))
	sql := fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %[2]s;\n"+
		"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"GRANT ALL ON %[2]s.* TO 'slurm'@'127.0.0.1';\n", p, slurmconf.AcctDB)
	_, err = rootfs.OutputStdin(ctx, 30*time.Second, c.Root, nil, sql, "mariadb", "--defaults-file="+slurmconf.MariaDBConfPath, "--batch")
	if err != nil {
		// mariadb may quote the statement that failed: never the password.
		return fmt.Errorf("create the slurmdbd database and user: %s", strings.ReplaceAll(err.Error(), p, "<password>"))
	}
	return nil
}

// slurmdbdReady is nil once slurmdbd answers sacctmgr (and so reaches its database).
func (c *Cluster) slurmdbdReady(ctx context.Context) error {
	_, err := c.sacctmgr(ctx, "-n", "-P", "list", "cluster", "format=cluster")
	return err
}

func (c *Cluster) sacctmgr(ctx context.Context, args ...string) (string, error) {
	out, err := rootfs.Output(ctx, 30*time.Second, c.Root, nil, append([]string{"sacctmgr", "-i"}, args...)...)
	return strings.TrimSpace(string(out)), err
}

// ensureAccounting makes the cluster, the QOS of slurmconf.LabQOS and the
// Associations. It reads first and changes only what differs, so on a
// set-up lab it costs four reads.
func (c *Cluster) ensureAccounting(ctx context.Context) error {
	clusters, err := c.sacctmgr(ctx, "-n", "-P", "list", "cluster", "format=cluster")
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(clusters), slurmconf.ClusterName) {
		if _, err := c.sacctmgr(ctx, "add", "cluster", slurmconf.ClusterName); err != nil {
			return err
		}
		// A new database gives the cluster a new id; slurmctld's saved state
		// holds the old one (or none, from a lab without accounting) and
		// would stop with "CLUSTER ID MISMATCH". Jobs keep their state.
		if err := os.Remove(filepath.Join(c.Root, "var/spool/slurmctld/clustername")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	qos, err := c.sacctmgr(ctx, "-n", "-P", "list", "qos", "format=name,priority,gracetime,preempt,preemptmode")
	if err != nil {
		return err
	}
	have := strings.Split(qos, "\n")
	for _, q := range slurmconf.LabQOS {
		if slices.Contains(have, q.Line()) {
			continue
		}
		if !slices.ContainsFunc(have, func(line string) bool { return strings.HasPrefix(line, q.Name+"|") }) {
			if _, err := c.sacctmgr(ctx, "add", "qos", q.Name); err != nil {
				return err
			}
		}
	}
	// Preempt names other QOS, so modify once all exist.
	for _, q := range slurmconf.LabQOS {
		if slices.Contains(have, q.Line()) {
			continue
		}
		if _, err := c.sacctmgr(ctx, q.ModifyArgs()...); err != nil {
			return err
		}
	}
	return c.ensureAssociations(ctx)
}

// ensureSecret returns the hex secret in path, making it (owner uid:gid, 0600) the first time.
func ensureSecret(path string, uid, gid uint32) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	s := hex.EncodeToString(key)
	if _, err := rootfs.WriteFileAs(path, s+"\n", 0o600, uid, gid); err != nil {
		return "", err
	}
	return s, nil
}

// ensureAssociations gives each association its account and its user an
// association there with its QOS, changing only what differs.
func (c *Cluster) ensureAssociations(ctx context.Context) error {
	accounts, err := c.sacctmgr(ctx, "-n", "-P", "list", "account", "format=account")
	if err != nil {
		return err
	}
	assocs, err := c.sacctmgr(ctx, "-n", "-P", "list", "user", "withassoc", "where", "cluster="+slurmconf.ClusterName,
		"format=user,defaultaccount,account,qos,defaultqos")
	if err != nil {
		return err
	}
	have, haveAccounts := strings.Split(assocs, "\n"), strings.Fields(accounts)
	for _, a := range c.Associations {
		if slices.Contains(have, a.row()) {
			continue
		}
		if !slices.Contains(haveAccounts, a.Account) {
			if _, err := c.sacctmgr(ctx, "add", "account", a.Account, "cluster="+slurmconf.ClusterName, "description=onepool lab", "organization=onepool"); err != nil {
				return err
			}
			haveAccounts = append(haveAccounts, a.Account)
		}
		// add user is a no-op for an association that exists ("Nothing new added").
		if out, err := c.sacctmgr(ctx, "add", "user", a.User, "account="+a.Account, "cluster="+slurmconf.ClusterName); err != nil && !strings.Contains(out, "Nothing new added") {
			return err
		}
		qos := slices.Clone(a.QOS)
		slices.Sort(qos)
		if _, err := c.sacctmgr(ctx, "modify", "user", "where", "name="+a.User, "cluster="+slurmconf.ClusterName, "set",
			"defaultaccount="+a.Account, "qos="+strings.Join(qos, ","), "defaultqos="+a.DefaultQOS); err != nil {
			return err
		}
	}
	return nil
}
