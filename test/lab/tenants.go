package lab

import (
	"context"
	"fmt"
	"path/filepath"
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
