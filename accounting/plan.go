package accounting

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/onepool/onepool/slurmrest"
)

// State is what slurmdbd holds now: every QOS and the cluster's
// associations (each account's, User empty, and each user's).
type State struct {
	QOS          []slurmrest.QOS
	Associations []slurmrest.Association
}

// Change is one thing to do to reach the Config. Exactly one of the
// payloads is set.
type Change struct {
	// Object: "qos high", "account users", "association alice/users".
	Object string
	// Create: the object is made; else its Details are changed.
	Create bool
	// Details, for the report: "priority 0 → 10".
	Details []string

	// QOS: SetQOS(QOSName, QOS).
	QOSName string
	QOS     *slurmrest.QOSUpdate
	// Account: AddAccount(cluster, *Account).
	Account *slurmrest.Account
	// AddAssociation: AddUserAssociation(*AddAssociation).
	AddAssociation *slurmrest.Association
	// UpdateAssociation: UpdateAssociation(AssociationKey, *UpdateAssociation).
	AssociationKey    slurmrest.Association
	UpdateAssociation *slurmrest.AssociationUpdate
}

func (c Change) String() string {
	switch {
	case c.Create && len(c.Details) == 0:
		return c.Object + ": make"
	case c.Create:
		return c.Object + ": make with " + strings.Join(c.Details, ", ")
	}
	return c.Object + ": change " + strings.Join(c.Details, "; ")
}

// Plan lists the changes that take have to want, in the order they can be
// made: new QOS first (a preempt list names only QOS that exist, so a new
// QOS gets its preempt list in a second change), then changed QOS, then
// accounts, then new associations, then changed ones. It changes only what
// want names and what differs; it deletes nothing. want must be
// Normalized. A QOS that an association or a preempt list names must be in
// want or in have.
func Plan(want Config, have State) ([]Change, error) {
	haveQOS := map[string]slurmrest.QOS{}
	for _, q := range have.QOS {
		haveQOS[q.Name] = q
	}
	known := func(name string) bool {
		_, ok := haveQOS[name]
		return ok || slices.ContainsFunc(want.QOS, func(q QOS) bool { return q.Name == name })
	}
	var missing []string
	need := func(where string, names ...string) {
		for _, n := range names {
			if n != "" && !known(n) {
				missing = append(missing, fmt.Sprintf("%s names QOS %s", where, n))
			}
		}
	}

	var creates, updates []Change
	for _, q := range want.QOS {
		if q.Preempt != nil {
			need("qos "+q.Name+"'s preempt", *q.Preempt...)
		}
		u, details, err := qosUpdate(q, haveQOS[q.Name])
		if err != nil {
			return nil, err
		}
		if _, ok := haveQOS[q.Name]; ok {
			if len(details) > 0 {
				updates = append(updates, Change{Object: "qos " + q.Name, Details: details, QOSName: q.Name, QOS: &u})
			}
			continue
		}
		// New: everything but its preempt list, which may name QOS made
		// after it; the list comes with the changes.
		preempt := u.Preempt
		u.Preempt = nil
		creates = append(creates, Change{Object: "qos " + q.Name, Create: true, Details: qosCreateDetails(u), QOSName: q.Name, QOS: &u})
		if preempt != nil && len(*preempt) > 0 {
			updates = append(updates, Change{Object: "qos " + q.Name, Details: []string{"preempt " + list(*preempt)},
				QOSName: q.Name, QOS: &slurmrest.QOSUpdate{Preempt: preempt}})
		}
	}
	changes := append(creates, updates...)

	assocs := map[[2]string]slurmrest.Association{} // {account, user}
	for _, a := range have.Associations {
		if a.Cluster == want.Cluster && a.Partition == "" {
			assocs[[2]string{a.Account, a.User}] = a
		}
	}
	var adds, assocUpdates []Change
	for _, acc := range want.Accounts {
		if _, ok := assocs[[2]string{acc.Name, ""}]; !ok {
			changes = append(changes, Change{Object: "account " + acc.Name, Create: true,
				Account: &slurmrest.Account{Name: acc.Name, Description: acc.Description, Organization: acc.Organization}})
		}
		for _, u := range acc.Users {
			need("association "+u.Name+"/"+acc.Name, append(slices.Clone(u.QOS), u.DefaultQOS)...)
			object := "association " + u.Name + "/" + acc.Name
			cur, ok := assocs[[2]string{acc.Name, u.Name}]
			if !ok {
				a := slurmrest.Association{Cluster: want.Cluster, Account: acc.Name, User: u.Name, DefaultQOS: u.DefaultQOS}
				var details []string
				if len(u.QOS) > 0 {
					a.QOS = sorted(u.QOS)
					details = append(details, "qos "+list(a.QOS))
				}
				if u.DefaultQOS != "" {
					details = append(details, "default qos "+u.DefaultQOS)
				}
				adds = append(adds, Change{Object: object, Create: true, Details: details, AddAssociation: &a})
				continue
			}
			var up slurmrest.AssociationUpdate
			var details []string
			if len(u.QOS) > 0 && !sameSet(u.QOS, cur.QOS) {
				up.QOS = ptr(sorted(u.QOS))
				details = append(details, "qos "+list(sorted(cur.QOS))+" → "+list(*up.QOS))
			}
			if u.DefaultQOS != "" && u.DefaultQOS != cur.DefaultQOS {
				up.DefaultQOS = ptr(u.DefaultQOS)
				details = append(details, "default qos "+orNone(cur.DefaultQOS)+" → "+u.DefaultQOS)
			}
			if len(details) > 0 {
				assocUpdates = append(assocUpdates, Change{Object: object, Details: details,
					AssociationKey: slurmrest.Association{Cluster: want.Cluster, Account: acc.Name, User: u.Name}, UpdateAssociation: &up})
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("no such QOS in the values or in Slurm: %s", strings.Join(slices.Compact(missing), "; "))
	}
	changes = append(changes, adds...)
	return append(changes, assocUpdates...), nil
}

// qosUpdate is what to set for q to hold, given what Slurm has (the zero
// QOS for a new one), with a detail per field that differs.
func qosUpdate(q QOS, have slurmrest.QOS) (slurmrest.QOSUpdate, []string, error) {
	var u slurmrest.QOSUpdate
	var details []string
	if q.Description != nil && *q.Description != have.Description {
		u.Description = q.Description
		details = append(details, fmt.Sprintf("description %q → %q", have.Description, *q.Description))
	}
	if q.Priority != nil && *q.Priority != have.Priority {
		u.Priority = q.Priority
		details = append(details, fmt.Sprintf("priority %d → %d", have.Priority, *q.Priority))
	}
	if q.GraceTime != nil && *q.GraceTime != have.GraceTimeSeconds {
		u.GraceTimeSeconds = q.GraceTime
		details = append(details, fmt.Sprintf("graceTime %ds → %ds", have.GraceTimeSeconds, *q.GraceTime))
	}
	if q.PreemptMode != nil && *q.PreemptMode != have.PreemptMode {
		u.PreemptMode = q.PreemptMode
		details = append(details, "preemptMode "+orNone(have.PreemptMode)+" → "+*q.PreemptMode)
	}
	if q.Preempt != nil && !sameSet(*q.Preempt, have.Preempt) {
		u.Preempt = ptr(sorted(*q.Preempt))
		details = append(details, "preempt "+list(sorted(have.Preempt))+" → "+list(*u.Preempt))
	}
	if q.MaxTRESPerUser != nil {
		want, err := slurmrest.ParseTRES(*q.MaxTRESPerUser)
		if err != nil {
			return u, nil, fmt.Errorf("qos %s: maxTRESPerUser: %w", q.Name, err)
		}
		for _, t := range want {
			cur := int64(-1) // no limit
			for _, h := range have.MaxTRESPerUser {
				if h.Key() == t.Key() {
					cur = h.Count
				}
			}
			if cur != t.Count {
				u.MaxTRESPerUser = append(u.MaxTRESPerUser, t)
				details = append(details, "maxTRESPerUser "+t.Key()+" "+limit(cur)+" → "+limit(t.Count))
			}
		}
	}
	return u, details, nil
}

// qosCreateDetails lists what a new QOS is made with.
func qosCreateDetails(u slurmrest.QOSUpdate) []string {
	var out []string
	if u.Description != nil {
		out = append(out, fmt.Sprintf("description %q", *u.Description))
	}
	if u.Priority != nil {
		out = append(out, fmt.Sprintf("priority %d", *u.Priority))
	}
	if u.GraceTimeSeconds != nil {
		out = append(out, fmt.Sprintf("graceTime %ds", *u.GraceTimeSeconds))
	}
	if u.PreemptMode != nil {
		out = append(out, "preemptMode "+*u.PreemptMode)
	}
	var tres []slurmrest.TRES
	for _, t := range u.MaxTRESPerUser {
		if t.Count >= 0 {
			tres = append(tres, t)
		}
	}
	if len(tres) > 0 {
		out = append(out, "maxTRESPerUser "+slurmrest.FormatTRES(tres))
	}
	return out
}

func limit(n int64) string {
	if n < 0 {
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

func sameSet(a, b []string) bool {
	return slices.Equal(sorted(a), sorted(b))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func list(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ",")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func ptr[T any](v T) *T { return &v }
