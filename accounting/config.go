// Package accounting keeps a Slurm cluster's accounting (slurmdbd) as an
// admin's values say: the QOS (priority, preemption, grace time, a
// per-user TRES limit), the accounts, and the users' associations in them
// with the QOS they may use. It makes what is missing and changes what
// differs, field by field; it never deletes anything, and a field the
// values leave out is left as Slurm has it. The slurm chart's accounting
// Job runs it (onepool-controller-manager ensure-accounting) through
// slurmrestd.
package accounting

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/onepool/onepool/slurmrest"
)

// Config is what the cluster's accounting should hold (the slurm chart
// renders it from its values as accounting.json).
type Config struct {
	// Cluster is slurm.conf's ClusterName: associations are on it.
	Cluster string `json:"cluster"`
	QOS     []QOS  `json:"qos,omitempty"`
	// Accounts, each with its users' associations. An account named more
	// than once is one account: its users are joined, and its description
	// and organization are the first given.
	Accounts []Account `json:"accounts,omitempty"`
}

// QOS is one QOS. Name alone makes it with Slurm's defaults; each field
// given is kept as given, each left out is left as Slurm has it.
type QOS struct {
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
	Priority    *uint32 `json:"priority,omitempty"`
	// Preempt: the QOS whose jobs this one's may preempt (preempt/qos).
	Preempt *[]string `json:"preempt,omitempty"`
	// PreemptMode: cluster (slurm.conf's PreemptMode), cancel or requeue.
	PreemptMode *string `json:"preemptMode,omitempty"`
	// GraceTime in seconds: a preempted job gets SIGTERM, then this long.
	GraceTime *uint32 `json:"graceTime,omitempty"`
	// MaxTRESPerUser: "gres/gpu=8,cpu=64"; a TRES at -1 has its limit
	// removed, a TRES left out keeps its own.
	MaxTRESPerUser *string `json:"maxTRESPerUser,omitempty"`
}

// Account is a Slurm account and the user associations in it.
// Description and organization are used when the account is made.
type Account struct {
	Name         string `json:"name"`
	Description  string `json:"description,omitempty"`
	Organization string `json:"organization,omitempty"`
	Users        []User `json:"users,omitempty"`
}

// User is a user's association in an account. QOS and DefaultQOS left
// out are left as Slurm has them (a new association: its account's).
type User struct {
	Name       string   `json:"name"`
	QOS        []string `json:"qos,omitempty"`
	DefaultQOS string   `json:"defaultQOS,omitempty"`
}

// Load reads a Config from a JSON file (an unknown field is an error),
// joins the accounts named more than once, and checks it.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var c Config
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if c, err = c.Normalize(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Normalize joins the accounts named more than once (the first
// description and organization given are the account's) and checks every
// name, mode and TRES list.
func (c Config) Normalize() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Cluster == "" {
		bad("cluster: empty")
	}
	names := map[string]bool{}
	for _, q := range c.QOS {
		switch {
		case !validName(q.Name):
			bad("qos %q: not a QOS name", q.Name)
		case names[q.Name]:
			bad("qos %s: named twice", q.Name)
		}
		names[q.Name] = true
		if q.PreemptMode != nil && !slices.Contains(slurmrest.PreemptModes, *q.PreemptMode) {
			bad("qos %s: preemptMode %q: want one of %s", q.Name, *q.PreemptMode, strings.Join(slurmrest.PreemptModes, ", "))
		}
		if q.Preempt != nil {
			for _, p := range *q.Preempt {
				if !validName(p) || p == q.Name {
					bad("qos %s: preempt %q: not another QOS's name", q.Name, p)
				}
			}
		}
		if q.MaxTRESPerUser != nil {
			if _, err := slurmrest.ParseTRES(*q.MaxTRESPerUser); err != nil {
				bad("qos %s: maxTRESPerUser: %v", q.Name, err)
			}
		}
	}
	var accounts []Account
	at := map[string]int{}
	for _, a := range c.Accounts {
		if !validName(a.Name) {
			bad("account %q: not an account name", a.Name)
			continue
		}
		i, seen := at[a.Name]
		if !seen {
			at[a.Name] = len(accounts)
			accounts = append(accounts, Account{Name: a.Name, Description: a.Description, Organization: a.Organization})
			i = len(accounts) - 1
		}
		acc := &accounts[i]
		if acc.Description == "" {
			acc.Description = a.Description
		}
		if acc.Organization == "" {
			acc.Organization = a.Organization
		}
		for _, u := range a.Users {
			switch {
			case !validName(u.Name):
				bad("account %s: user %q: not a user name", a.Name, u.Name)
				continue
			case slices.ContainsFunc(acc.Users, func(o User) bool { return o.Name == u.Name }):
				bad("account %s: user %s named twice", a.Name, u.Name)
				continue
			case u.DefaultQOS != "" && len(u.QOS) > 0 && !slices.Contains(u.QOS, u.DefaultQOS):
				bad("account %s: user %s: defaultQOS %s is not in its qos (%s)", a.Name, u.Name, u.DefaultQOS, strings.Join(u.QOS, ","))
			}
			for _, q := range append(slices.Clone(u.QOS), u.DefaultQOS) {
				if q != "" && !validName(q) {
					bad("account %s: user %s: qos %q: not a QOS name", a.Name, u.Name, q)
				}
			}
			acc.Users = append(acc.Users, u)
		}
	}
	c.Accounts = accounts
	return c, errors.Join(errs...)
}

// validName: what Slurm takes as a QOS, account or user name here (no
// list separators, no spaces, no quotes).
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ",= \t\n'\"")
}
