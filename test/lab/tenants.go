package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab's two teams for the tenancy tests: each a Slurm user of its own
// (in the rootfs, so slurmctld and every slurmd resolve it) with an
// account of its own. Team A may use every lab QOS; team B only normal.
// A TenantPolicy maps a namespace to one of them (the tests make those).
var labTeams = []struct {
	user    string
	uid     int
	account string
	qos     []string
}{
	{TeamA, 2101, TeamA, []string{QOSHigh, QOSLow, QOSNormal}},
	{TeamB, 2102, TeamB, []string{QOSNormal}},
}

// Team Slurm users (and their accounts: same names).
const (
	TeamA = "team-a"
	TeamB = "team-b"
)

// ensureTeamUsers adds the teams' users to the Slurm rootfs.
func (l *Lab) ensureTeamUsers(ctx context.Context) error {
	for _, t := range labTeams {
		if _, _, err := l.chrootUser(t.user); err == nil {
			continue
		}
		if err := rootfs.RunLoggedIn(ctx, time.Minute, filepath.Join(l.LogDir(), "setup.log"), l.RootFS(),
			"useradd", "--uid", fmt.Sprint(t.uid), "--user-group", "--no-create-home",
			"--home-dir", "/tmp", "--shell", "/bin/sh", t.user); err != nil {
			return err
		}
	}
	return nil
}

// ensureTeamAssociations gives each team its account and its user an
// association there with the team's QOS (normal the default).
func (l *Lab) ensureTeamAssociations(ctx context.Context) error {
	accounts, err := l.sacctmgr(ctx, "-n", "-P", "list", "account", "format=account")
	if err != nil {
		return err
	}
	assocs, err := l.sacctmgr(ctx, "-n", "-P", "list", "user", "withassoc", "where", "cluster="+ClusterName,
		"format=user,defaultaccount,account,qos,defaultqos")
	if err != nil {
		return err
	}
	have := strings.Split(assocs, "\n")
	for _, t := range labTeams {
		if !slices.Contains(strings.Fields(accounts), t.account) {
			if _, err := l.sacctmgr(ctx, "add", "account", t.account, "cluster="+ClusterName, "description=onepool lab team", "organization=onepool"); err != nil {
				return err
			}
		}
		qos := slices.Clone(t.qos)
		slices.Sort(qos)
		if slices.Contains(have, strings.Join([]string{t.user, t.account, t.account, strings.Join(qos, ","), QOSNormal}, "|")) {
			continue
		}
		if out, err := l.sacctmgr(ctx, "add", "user", t.user, "account="+t.account, "cluster="+ClusterName); err != nil && !strings.Contains(out, "Nothing new added") {
			return err
		}
		if _, err := l.sacctmgr(ctx, "modify", "user", "where", "name="+t.user, "cluster="+ClusterName, "set",
			"defaultaccount="+t.account, "qos="+strings.Join(qos, ","), "defaultqos="+QOSNormal); err != nil {
			return err
		}
	}
	return nil
}
