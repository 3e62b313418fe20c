package lab

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

	"github.com/onepool/onepool/test/lab/rootfs"
	"github.com/onepool/onepool/test/lab/slurmconf"
)

// Accounting: MariaDB and slurmdbd in the chroot (their config: package
// slurmconf), so Slurm has associations and QOS, and preempt/qos can work.
const (
	// Account is the Slurm account every lab user submits under.
	Account = "onepool"
)

// QOS names of the lab. QOSHigh preempts (cancels) jobs of QOSNormal and QOSLow.
const (
	QOSNormal = slurmconf.QOSNormal
	QOSLow    = slurmconf.QOSLow
	QOSHigh   = slurmconf.QOSHigh
)

// accountingUsers get an association in Account with every lab QOS.
// root submits with sbatch in tests; slurm is the user of onepool's token,
// so every job submitted through slurmrestd runs as slurm.
var accountingUsers = []string{"root", "slurm", JailUser}

func (l *Lab) mariadb() (daemon, error) {
	uid, gid, err := l.chrootUser("mysql")
	if err != nil {
		return daemon{}, err
	}
	return daemon{Name: "mariadbd", Argv: []string{"/usr/sbin/mariadbd", "--defaults-file=" + slurmconf.MariaDBConfPath},
		Chroot: l.RootFS(), Port: MariaDBPort, UID: uid, GID: gid, Env: rootfs.Env()}, nil
}

func (l *Lab) slurmdbd() daemon {
	return daemon{Name: "slurmdbd", Argv: []string{"/usr/sbin/slurmdbd", "-D"}, Chroot: l.RootFS(), Port: SlurmdbdPort, Env: rootfs.Env()}
}

// configureAccounting writes MariaDB's and slurmdbd's config and makes the
// database folder once. It says whether a config changed (the daemons must
// then restart).
func (l *Lab) configureAccounting(ctx context.Context, cfg slurmconf.Config) (bool, error) {
	root := l.RootFS()
	mysqlUID, mysqlGID, err := l.chrootUser("mysql")
	if err != nil {
		return false, err
	}
	slurmUID, slurmGID, err := l.chrootUser("slurm")
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
	c1, err := writeIfChanged(filepath.Join(root, slurmconf.MariaDBConfPath), slurmconf.MariaDBConf())
	if err != nil {
		return false, err
	}
	// slurmdbd refuses a config others can read: it holds the DB password.
	c2, err := writeFileAs(filepath.Join(root, slurmconf.SlurmdbdConfPath), cfg.SlurmdbdConf(pass), 0o600, slurmUID, slurmGID)
	if err != nil {
		return false, err
	}
	if err := l.initMariaDB(ctx); err != nil {
		return false, err
	}
	return c1 || c2, nil
}

// initMariaDB makes the data folder with mariadb-install-db once. It is made
// in a sibling folder and renamed when complete.
func (l *Lab) initMariaDB(ctx context.Context) error {
	root := l.RootFS()
	data := filepath.Join(root, slurmconf.MariaDBDataDir)
	if _, err := os.Stat(filepath.Join(data, "mysql")); err == nil {
		return nil
	}
	tmp := slurmconf.MariaDBDataDir + ".tmp"
	if err := os.RemoveAll(filepath.Join(root, tmp)); err != nil {
		return err
	}
	start := time.Now()
	err := rootfs.RunLoggedIn(ctx, 2*time.Minute, filepath.Join(l.LogDir(), "mariadb-install-db.log"), root,
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
	fmt.Fprintf(l.cfg.Log, "lab: mariadb data folder made in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// mariadbReady is nil once MariaDB answers on its socket.
func (l *Lab) mariadbReady(ctx context.Context) error {
	_, err := rootfs.Output(ctx, 5*time.Second, l.RootFS(), nil, "mariadb-admin", "--defaults-file="+slurmconf.MariaDBConfPath, "ping")
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
func (l *Lab) ensureDBUser(ctx context.Context) error {
	pass, err := os.ReadFile(filepath.Join(l.RootFS(), slurmconf.DBDPassPath))
	if err != nil {
		return err
	}
	p := strings.TrimSpace(string(pass))
	sql := fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %[2]s;\n"+
		"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"GRANT ALL ON %[2]s.* TO 'slurm'@'127.0.0.1';\n", p, slurmconf.AcctDB)
	_, err = rootfs.OutputStdin(ctx, 30*time.Second, l.RootFS(), nil, sql, "mariadb", "--defaults-file="+slurmconf.MariaDBConfPath, "--batch")
	if err != nil {
		// mariadb may quote the statement that failed: never the password.
		return fmt.Errorf("create the slurmdbd database and user: %s", strings.ReplaceAll(err.Error(), p, "<password>"))
	}
	return nil
}

// slurmdbdReady is nil once slurmdbd answers sacctmgr (and so reaches its database).
func (l *Lab) slurmdbdReady(ctx context.Context) error {
	_, err := l.sacctmgr(ctx, "-n", "-P", "list", "cluster", "format=cluster")
	return err
}

func (l *Lab) sacctmgr(ctx context.Context, args ...string) (string, error) {
	out, err := rootfs.Output(ctx, 30*time.Second, l.RootFS(), nil, append([]string{"sacctmgr", "-i"}, args...)...)
	return strings.TrimSpace(string(out)), err
}

// ensureAccounting makes the cluster, account, users and QOS the lab needs.
// It reads first and changes only what differs, so on a set-up lab it costs
// three reads.
func (l *Lab) ensureAccounting(ctx context.Context) error {
	clusters, err := l.sacctmgr(ctx, "-n", "-P", "list", "cluster", "format=cluster")
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(clusters), ClusterName) {
		if _, err := l.sacctmgr(ctx, "add", "cluster", ClusterName); err != nil {
			return err
		}
		// A new database gives the cluster a new id; slurmctld's saved state
		// holds the old one (or none, from a lab without accounting) and
		// would stop with "CLUSTER ID MISMATCH". Jobs keep their state.
		if err := os.Remove(filepath.Join(l.RootFS(), "var/spool/slurmctld/clustername")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	qos, err := l.sacctmgr(ctx, "-n", "-P", "list", "qos", "format=name,priority,gracetime,preempt,preemptmode")
	if err != nil {
		return err
	}
	have := strings.Split(qos, "\n")
	for _, q := range slurmconf.LabQOS {
		if slices.Contains(have, q.Line()) {
			continue
		}
		if !slices.ContainsFunc(have, func(line string) bool { return strings.HasPrefix(line, q.Name+"|") }) {
			if _, err := l.sacctmgr(ctx, "add", "qos", q.Name); err != nil {
				return err
			}
		}
	}
	// Preempt names other QOS, so modify once all exist.
	for _, q := range slurmconf.LabQOS {
		if slices.Contains(have, q.Line()) {
			continue
		}
		if _, err := l.sacctmgr(ctx, q.ModifyArgs()...); err != nil {
			return err
		}
	}
	if err := l.ensureAssociations(ctx); err != nil {
		return err
	}
	return l.ensureTeamAssociations(ctx)
}

func (l *Lab) ensureAssociations(ctx context.Context) error {
	qosList := make([]string, 0, len(slurmconf.LabQOS))
	for _, q := range slurmconf.LabQOS {
		qosList = append(qosList, q.Name)
	}
	slices.Sort(qosList)
	assocs, err := l.sacctmgr(ctx, "-n", "-P", "list", "user", "withassoc", "where", "cluster="+ClusterName,
		"format=user,defaultaccount,account,qos,defaultqos")
	if err != nil {
		return err
	}
	have := strings.Split(assocs, "\n")
	var missing []string
	for _, u := range accountingUsers {
		if !slices.Contains(have, strings.Join([]string{u, Account, Account, strings.Join(qosList, ","), QOSNormal}, "|")) {
			missing = append(missing, u)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	accounts, err := l.sacctmgr(ctx, "-n", "-P", "list", "account", "format=account")
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(accounts), Account) {
		if _, err := l.sacctmgr(ctx, "add", "account", Account, "cluster="+ClusterName, "description=onepool lab", "organization=onepool"); err != nil {
			return err
		}
	}
	users := strings.Join(missing, ",")
	// add user is a no-op for an association that exists ("Nothing new added").
	if out, err := l.sacctmgr(ctx, "add", "user", users, "account="+Account, "cluster="+ClusterName); err != nil && !strings.Contains(out, "Nothing new added") {
		return err
	}
	if _, err := l.sacctmgr(ctx, "modify", "user", "where", "name="+users, "cluster="+ClusterName, "set",
		"defaultaccount="+Account, "qos="+strings.Join(qosList, ","), "defaultqos="+QOSNormal); err != nil {
		return err
	}
	return nil
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
	if _, err := writeFileAs(path, s+"\n", 0o600, uid, gid); err != nil {
		return "", err
	}
	return s, nil
}

// writeFileAs is writeIfChanged for a file with its own owner and mode,
// which it also puts right when the content is already right.
func writeFileAs(path, body string, mode os.FileMode, uid, gid uint32) (bool, error) {
	changed := true
	if old, err := os.ReadFile(path); err == nil && string(old) == body {
		changed = false
	}
	if changed {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return false, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), mode); err != nil {
			return false, err
		}
		if err := os.Chown(tmp, int(uid), int(gid)); err != nil {
			return false, err
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return false, err
		}
		return true, os.Rename(tmp, path)
	}
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		return false, err
	}
	return false, os.Chmod(path, mode)
}
