package lab

import (
	"github.com/onepool/onepool/test/lab/slurmcluster"
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

// labAssociations are the Slurm associations the lab's accounting holds:
// accountingUsers in Account with every QOS, each team's user in its own
// account with the team's QOS; normal is everyone's default.
func labAssociations() []slurmcluster.Association {
	all := make([]string, 0, len(slurmconf.LabQOS))
	for _, q := range slurmconf.LabQOS {
		all = append(all, q.Name)
	}
	var as []slurmcluster.Association
	for _, u := range accountingUsers {
		as = append(as, slurmcluster.Association{User: u, Account: Account, QOS: all, DefaultQOS: QOSNormal})
	}
	for _, t := range labTeams {
		as = append(as, slurmcluster.Association{User: t.user, Account: t.account, QOS: t.qos, DefaultQOS: QOSNormal})
	}
	return as
}
