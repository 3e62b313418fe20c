package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/onepool/onepool/test/lab/rootfs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Accounting: MariaDB and slurmdbd in the chroot, so Slurm has associations
// and QOS, and preempt/qos can work. MariaDB keeps its own data folder, config
// and socket; the Debian package's /var/lib/mysql and /etc/mysql/my.cnf are
// not used.
const (
	mariadbConfPath  = "/etc/mysql/onepool-lab.cnf"
	mariadbDataDir   = "/var/lib/onepool-mariadb"
	mariadbRunDir    = "/run/onepool-mariadb"
	mariadbSocket    = mariadbRunDir + "/mariadb.sock"
	slurmdbdConfPath = "/etc/slurm/slurmdbd.conf"
	dbdPassPath      = "/etc/slurm/onepool-dbd.pass"
	slurmAcctDB      = "slurm_acct_db"
	// Account is the Slurm account every lab user submits under.
	Account = "onepool"
)

// QOS names of the lab. QOSHigh preempts (cancels) jobs of QOSNormal and QOSLow.
const (
	QOSNormal = "normal"
	QOSLow    = "low"
	QOSHigh   = "high"
)

// qosSpec is one QOS as `sacctmgr list qos format=Name,Priority,GraceTime,Preempt,PreemptMode -P` prints it.
type qosSpec struct {
	name, priority string
	graceSecs      int
	preempt        string
	preemptMode    string
}

// labQOS is the QOS table the lab keeps. A preempted job of normal or low
// gets SIGTERM and up to GraceTime seconds before it is killed.
var labQOS = []qosSpec{
	{QOSNormal, "10", 30, "", "cluster"},
	{QOSLow, "0", 30, "", "cluster"},
	{QOSHigh, "1000", 0, "low,normal", "cancel"},
}

// accountingUsers get an association in Account with every lab QOS.
// root submits with sbatch in tests; slurm is the user of onepool's token,
// so every job submitted through slurmrestd runs as slurm.
var accountingUsers = []string{"root", "slurm", JailUser}

func (q qosSpec) line() string {
	grace := time.Duration(q.graceSecs) * time.Second
	hms := fmt.Sprintf("%02d:%02d:%02d", int(grace.Hours()), int(grace.Minutes())%60, q.graceSecs%60)
	return strings.Join([]string{q.name, q.priority, hms, q.preempt, q.preemptMode}, "|")
}

func (q qosSpec) modifyArgs() []string {
	// "preempt=" (nothing after it) clears the list, as preempt='' does in a shell.
	return []string{"modify", "qos", "where", "name=" + q.name, "set",
		"priority=" + q.priority, "gracetime=" + strconv.Itoa(q.graceSecs), "preempt=" + q.preempt, "preemptmode=" + q.preemptMode}
}

func mariadbConf() string {
	return fmt.Sprintf(`# Written by the onepool lab (test/lab); edits are overwritten by `+"`make up`"+`.
[client]
socket = %[1]s
port = %[2]d

[mariadbd]
datadir = %[3]s
socket = %[1]s
pid-file = %[4]s/mariadbd.pid
port = %[2]d
bind-address = 127.0.0.1
skip-name-resolve
log-error = /var/log/onepool/mariadb.log
skip-log-bin
performance_schema = OFF
# Small and quick: a lab database holds a few hundred rows.
innodb_buffer_pool_size = 64M
innodb_log_file_size = 48M
innodb_flush_log_at_trx_commit = 2
# What Slurm's accounting guide asks for.
innodb_lock_wait_timeout = 900
max_allowed_packet = 16M
`, mariadbSocket, MariaDBPort, mariadbDataDir, mariadbRunDir)
}

func (c slurmConfig) slurmdbdConf(pass string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# Written by the onepool lab (test/lab); edits are overwritten by `make up`.")
	w("AuthType=auth/munge")
	w("AuthAltTypes=auth/jwt")
	w("AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key")
	w("DbdHost=%s", c.ControlHost)
	w("DbdAddr=127.0.0.1")
	w("DbdPort=%d", SlurmdbdPort)
	w("SlurmUser=slurm")
	w("DebugLevel=info")
	w("LogFile=/var/log/onepool/slurmdbd.log")
	w("PidFile=/run/slurmdbd.pid")
	w("StorageType=accounting_storage/mysql")
	w("StorageHost=127.0.0.1")
	w("StoragePort=%d", MariaDBPort)
	w("StorageUser=slurm")
	w("StoragePass=%s", pass)
	w("StorageLoc=%s", slurmAcctDB)
	return b.String()
}

func (l *Lab) mariadb() (daemon, error) {
	uid, gid, err := l.chrootUser("mysql")
	if err != nil {
		return daemon{}, err
	}
	return daemon{Name: "mariadbd", Argv: []string{"/usr/sbin/mariadbd", "--defaults-file=" + mariadbConfPath},
		Chroot: l.RootFS(), Port: MariaDBPort, UID: uid, GID: gid, Env: rootfs.Env()}, nil
}

func (l *Lab) slurmdbd() daemon {
	return daemon{Name: "slurmdbd", Argv: []string{"/usr/sbin/slurmdbd", "-D"}, Chroot: l.RootFS(), Port: SlurmdbdPort, Env: rootfs.Env()}
}

// configureAccounting writes MariaDB's and slurmdbd's config and makes the
// database folder once. It says whether a config changed (the daemons must
// then restart).
func (l *Lab) configureAccounting(ctx context.Context, cfg slurmConfig) (bool, error) {
	root := l.RootFS()
	mysqlUID, mysqlGID, err := l.chrootUser("mysql")
	if err != nil {
		return false, err
	}
	slurmUID, slurmGID, err := l.chrootUser("slurm")
	if err != nil {
		return false, err
	}
	run := filepath.Join(root, mariadbRunDir)
	if err := os.MkdirAll(run, 0o755); err != nil {
		return false, err
	}
	if err := os.Chown(run, int(mysqlUID), int(mysqlGID)); err != nil {
		return false, err
	}
	pass, err := ensureSecret(filepath.Join(root, dbdPassPath), slurmUID, slurmGID)
	if err != nil {
		return false, err
	}
	c1, err := writeIfChanged(filepath.Join(root, mariadbConfPath), mariadbConf())
	if err != nil {
		return false, err
	}
	// slurmdbd refuses a config others can read: it holds the DB password.
	c2, err := writeFileAs(filepath.Join(root, slurmdbdConfPath), cfg.slurmdbdConf(pass), 0o600, slurmUID, slurmGID)
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
	data := filepath.Join(root, mariadbDataDir)
	if _, err := os.Stat(filepath.Join(data, "mysql")); err == nil {
		return nil
	}
	tmp := mariadbDataDir + ".tmp"
	if err := os.RemoveAll(filepath.Join(root, tmp)); err != nil {
		return err
	}
	start := time.Now()
	err := rootfs.RunLoggedIn(ctx, 2*time.Minute, filepath.Join(l.LogDir(), "mariadb-install-db.log"), root,
		"mariadb-install-db", "--defaults-file="+mariadbConfPath, "--user=mysql", "--datadir="+tmp,
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
	_, err := rootfs.Output(ctx, 5*time.Second, l.RootFS(), nil, "mariadb-admin", "--defaults-file="+mariadbConfPath, "ping")
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
	pass, err := os.ReadFile(filepath.Join(l.RootFS(), dbdPassPath))
	if err != nil {
		return err
	}
	p := strings.TrimSpace(string(pass))
	sql := fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %[2]s;\n"+
		"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"GRANT ALL ON %[2]s.* TO 'slurm'@'127.0.0.1';\n", p, slurmAcctDB)
	_, err = rootfs.OutputStdin(ctx, 30*time.Second, l.RootFS(), nil, sql, "mariadb", "--defaults-file="+mariadbConfPath, "--batch")
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
	for _, q := range labQOS {
		if slices.Contains(have, q.line()) {
			continue
		}
		if !slices.ContainsFunc(have, func(line string) bool { return strings.HasPrefix(line, q.name+"|") }) {
			if _, err := l.sacctmgr(ctx, "add", "qos", q.name); err != nil {
				return err
			}
		}
	}
	// Preempt names other QOS, so modify once all exist.
	for _, q := range labQOS {
		if slices.Contains(have, q.line()) {
			continue
		}
		if _, err := l.sacctmgr(ctx, q.modifyArgs()...); err != nil {
			return err
		}
	}
	if err := l.ensureAssociations(ctx); err != nil {
		return err
	}
	return l.ensureTeamAssociations(ctx)
}

func (l *Lab) ensureAssociations(ctx context.Context) error {
	qosList := make([]string, 0, len(labQOS))
	for _, q := range labQOS {
		qosList = append(qosList, q.name)
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
