package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/onepool/onepool/slurmrest/model"
)

// slurmdbd's endpoints, after /slurmdb/<version> (slurmrestd's
// openapi/slurmdbd plugin).
const (
	pathDBClusters    = "/clusters/"
	pathDBQOS         = "/qos/"
	pathDBQOSName     = "/qos/{qos}"
	pathDBAssocs      = "/associations/"
	pathDBAccountsAdd = "/accounts_association/"
	pathDBUsersAdd    = "/users_association/"
)

// Why a change sends back the whole object: on Slurm 24.11 and 26.05 a
// POST /qos/ that leaves out `flags` or `preempt.mode` sets them to none
// (DISABLED), and a POST /associations/ that leaves out the TRES limits
// (max.tres.*: GrpTRES, MaxTRES, MaxTRESPerNode, GrpTRESMins,
// GrpTRESRunMins, MaxTRESMins) removes them. A QOS or association sent
// back as listed, with only onepool's fields changed, keeps every other
// setting (checked on both releases). Accounts are never changed, only
// made: a POST /accounts/ drops the account's coordinators.

// ListClusters lists the clusters slurmdbd knows (a slurmctld registers
// its own when it first reaches slurmdbd).
func (b *Backend) ListClusters(ctx context.Context) ([]string, error) {
	const op = "list clusters"
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathDBClusters, db: true})
	if err != nil {
		return nil, err
	}
	var resp clustersResp
	if err := decode(op, b.dbEndpoint(http.MethodGet, pathDBClusters), r, &resp); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.Clusters))
	for _, c := range resp.Clusters {
		if n := deref(c.Name); n != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

// ListQOS lists every QOS.
func (b *Backend) ListQOS(ctx context.Context) ([]model.QOS, error) {
	const op = "list QOS"
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathDBQOS, db: true})
	if err != nil {
		return nil, err
	}
	var resp qosResp
	if err := decode(op, b.dbEndpoint(http.MethodGet, pathDBQOS), r, &resp); err != nil {
		return nil, err
	}
	out := make([]model.QOS, 0, len(resp.Qos))
	for _, q := range resp.Qos {
		out = append(out, qosModel(q))
	}
	return out, nil
}

func qosModel(q wireQOS) model.QOS {
	m := model.QOS{Name: deref(q.Name), Description: deref(q.Description), Priority: u32(q.Priority)}
	if l := q.Limits; l != nil {
		if g := deref(l.GraceTime); g > 0 {
			m.GraceTimeSeconds = uint32(g)
		}
		if l.Max != nil && l.Max.Tres != nil && l.Max.Tres.Per != nil {
			m.MaxTRESPerUser = tresModel(deref(l.Max.Tres.Per.User))
		}
	}
	var mode []string
	if p := q.Preempt; p != nil {
		m.Preempt = slices.Clone(deref(p.List))
		mode = deref(p.Mode)
	}
	m.PreemptMode = preemptModeModel(mode)
	return m
}

func tresModel(ts []wireTRES) []model.TRES {
	var out []model.TRES
	for _, t := range ts {
		out = append(out, model.TRES{Type: t.Type, Name: deref(t.Name), Count: deref(t.Count)})
	}
	return out
}

func tresWire(ts []model.TRES) []wireTRES {
	out := make([]wireTRES, 0, len(ts))
	for _, t := range ts {
		w := wireTRES{Type: t.Type, Count: ptr(t.Count)}
		if t.Name != "" {
			w.Name = ptr(t.Name)
		}
		out = append(out, w)
	}
	return out
}

// preemptModeModel reads a QOS's preempt mode flags: none or DISABLED is
// Slurm's OFF, which `sacctmgr` shows as "cluster" (slurm.conf's mode).
func preemptModeModel(flags []string) string {
	var out []string
	for _, f := range flags {
		if f != "DISABLED" {
			out = append(out, strings.ToLower(f))
		}
	}
	if len(out) == 0 {
		return model.PreemptModeCluster
	}
	return strings.Join(out, ",")
}

// preemptModeWire is preemptModeModel's inverse.
func preemptModeWire(mode string) []string {
	if mode == model.PreemptModeCluster {
		return []string{"DISABLED"}
	}
	return strings.Split(strings.ToUpper(mode), ",")
}

// SetQOS makes the QOS with u's fields when it is missing, else changes
// u's fields and nothing else (the QOS sent back whole). It says whether
// it made one. A new QOS's Preempt may name only QOS that exist already.
func (b *Backend) SetQOS(ctx context.Context, name string, u model.QOSUpdate) (bool, error) {
	op := "set QOS " + name
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathDBQOSName, args: []string{name}, db: true})
	if err != nil {
		return false, err
	}
	objs, err := rawObjects(r.body, "qos")
	if err != nil {
		return false, badResponse(op, b.dbEndpoint(http.MethodGet, pathDBQOSName), r, "%w", err)
	}
	var current map[string]any
	var currentWire wireQOS
	for _, raw := range objs {
		var q wireQOS
		if err := json.Unmarshal(raw, &q); err != nil {
			return false, badResponse(op, b.dbEndpoint(http.MethodGet, pathDBQOSName), r, "decoding a QOS: %w", err)
		}
		if deref(q.Name) == name {
			if current, err = objectOf(raw); err != nil {
				return false, badResponse(op, b.dbEndpoint(http.MethodGet, pathDBQOSName), r, "%w", err)
			}
			currentWire = q
		}
	}
	created := current == nil
	if created {
		current = newQOS(name, u)
	} else {
		patchQOS(current, qosModel(currentWire), u)
	}
	_, err = b.call(ctx, request{op: op, method: http.MethodPost, path: pathDBQOS, db: true, body: map[string]any{"qos": []any{current}}})
	return created, err
}

// newQOS is a QOS to make: its name and u's fields (a TRES whose limit is
// removed, -1, is left out: a new QOS has none), and always a preempt mode
// (slurmrestd takes a QOS without one as DISABLED anyway).
func newQOS(name string, u model.QOSUpdate) map[string]any {
	obj := map[string]any{"name": name}
	var tres []model.TRES
	for _, t := range u.MaxTRESPerUser {
		if t.Count >= 0 {
			tres = append(tres, t)
		}
	}
	u.MaxTRESPerUser = tres
	if u.PreemptMode == nil {
		u.PreemptMode = ptr(model.PreemptModeCluster)
	}
	if u.Preempt != nil && len(*u.Preempt) == 0 {
		u.Preempt = nil
	}
	patchQOS(obj, model.QOS{}, u)
	return obj
}

// patchQOS sets u's fields in a QOS object as slurmrestd listed it (have
// is the same QOS read).
func patchQOS(obj map[string]any, have model.QOS, u model.QOSUpdate) {
	if u.Description != nil {
		obj["description"] = *u.Description
	}
	if u.Priority != nil {
		obj["priority"] = number(int64(*u.Priority))
	}
	if u.GraceTimeSeconds != nil {
		setIn(obj, int64(*u.GraceTimeSeconds), "limits", "grace_time")
	}
	if u.Preempt != nil {
		setIn(obj, slices.Clone(*u.Preempt), "preempt", "list")
	}
	if u.PreemptMode != nil {
		setIn(obj, preemptModeWire(*u.PreemptMode), "preempt", "mode")
	}
	if len(u.MaxTRESPerUser) > 0 {
		// Every TRES limit the QOS has, with u's set (a -1 sent removes it).
		tres := slices.Clone(have.MaxTRESPerUser)
		for _, t := range u.MaxTRESPerUser {
			if i := slices.IndexFunc(tres, func(h model.TRES) bool { return h.Key() == t.Key() }); i >= 0 {
				tres[i].Count = t.Count
			} else {
				tres = append(tres, t)
			}
		}
		setIn(obj, tresWire(tres), "limits", "max", "tres", "per", "user")
	}
}

// ListAssociations lists the cluster's associations: each account's (User
// empty) and each user's.
func (b *Backend) ListAssociations(ctx context.Context, cluster string) ([]model.Association, error) {
	const op = "list associations"
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathDBAssocs, db: true, query: url.Values{"cluster": {cluster}}})
	if err != nil {
		return nil, err
	}
	var resp assocsResp
	if err := decode(op, b.dbEndpoint(http.MethodGet, pathDBAssocs), r, &resp); err != nil {
		return nil, err
	}
	out := make([]model.Association, 0, len(resp.Associations))
	for _, a := range resp.Associations {
		out = append(out, assocModel(a))
	}
	return out, nil
}

func assocModel(a wireAssoc) model.Association {
	m := model.Association{Cluster: deref(a.Cluster), Account: deref(a.Account), User: a.User, Partition: deref(a.Partition),
		QOS: slices.Clone(deref(a.Qos))}
	if a.Default != nil {
		m.DefaultQOS = deref(a.Default.Qos)
	}
	return m
}

// AddAccount makes the account, when missing, and its association on the
// cluster (sacctmgr add account); one that exists is left as it is.
func (b *Backend) AddAccount(ctx context.Context, cluster string, a model.Account) error {
	body := accountsAddReq{AssociationCondition: &accountsAddCond{Accounts: []string{a.Name}, Clusters: &[]string{cluster}}}
	if a.Description != "" || a.Organization != "" {
		body.Account = &accountShort{}
		if a.Description != "" {
			body.Account.Description = ptr(a.Description)
		}
		if a.Organization != "" {
			body.Account.Organization = ptr(a.Organization)
		}
	}
	// 304: nothing was new.
	_, err := b.call(ctx, request{op: "add account " + a.Name, method: http.MethodPost, path: pathDBAccountsAdd, db: true, body: body})
	return err
}

// AddUserAssociation makes the user's association in the account, and the
// user when missing (sacctmgr add user: a new user's default account is
// this one; an existing user's stays), with a's QOS and default QOS when
// set. An association that exists is left as it is (HTTP 304); so is one
// slurmdbd refuses in silence (an account or QOS it does not know): read
// the associations back to know.
func (b *Backend) AddUserAssociation(ctx context.Context, a model.Association) error {
	var body usersAddReq
	c := &body.AssociationCondition
	c.Users = []string{a.User}
	c.Accounts = &[]string{a.Account}
	c.Clusters = &[]string{a.Cluster}
	if a.Partition != "" {
		return fmt.Errorf("slurmrest: add association %s/%s: partitions are not supported", a.User, a.Account)
	}
	if a.QOS != nil || a.DefaultQOS != "" {
		c.Association = &assocRecSet{}
		if a.QOS != nil {
			c.Association.Qoslevel = ptr(slices.Clone(a.QOS))
		}
		if a.DefaultQOS != "" {
			c.Association.Defaultqos = ptr(a.DefaultQOS)
		}
	}
	_, err := b.call(ctx, request{op: "add association " + a.User + "/" + a.Account, method: http.MethodPost, path: pathDBUsersAdd, db: true, body: body})
	return err
}

// UpdateAssociation sets u's fields on the association key names (cluster,
// account, user, partition) and nothing else (the association sent back
// whole). ErrNotFound when there is none.
func (b *Backend) UpdateAssociation(ctx context.Context, key model.Association, u model.AssociationUpdate) error {
	op := "update association " + key.User + "/" + key.Account
	q := url.Values{"cluster": {key.Cluster}, "account": {key.Account}}
	if key.User != "" {
		q.Set("user", key.User)
	}
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathDBAssocs, db: true, query: q})
	if err != nil {
		return err
	}
	ep := b.dbEndpoint(http.MethodGet, pathDBAssocs)
	objs, err := rawObjects(r.body, "associations")
	if err != nil {
		return badResponse(op, ep, r, "%w", err)
	}
	var found []map[string]any
	for _, raw := range objs {
		var a wireAssoc
		if err := json.Unmarshal(raw, &a); err != nil {
			return badResponse(op, ep, r, "decoding an association: %w", err)
		}
		if m := assocModel(a); m.Cluster == key.Cluster && m.Account == key.Account && m.User == key.User && m.Partition == key.Partition {
			obj, err := objectOf(raw)
			if err != nil {
				return badResponse(op, ep, r, "%w", err)
			}
			found = append(found, obj)
		}
	}
	switch len(found) {
	case 0:
		return &model.APIError{Op: op, Endpoint: ep, StatusCode: r.status, Kind: model.ErrNotFound}
	case 1:
	default:
		return badResponse(op, ep, r, "%d associations match", len(found))
	}
	obj := found[0]
	if u.QOS != nil {
		obj["qos"] = slices.Clone(*u.QOS)
	}
	if u.DefaultQOS != nil {
		setIn(obj, *u.DefaultQOS, "default", "qos")
	}
	_, err = b.call(ctx, request{op: op, method: http.MethodPost, path: pathDBAssocs, db: true, body: map[string]any{"associations": []any{obj}}})
	return err
}

// rawObjects is the list under key of an answer, each object as sent.
func rawObjects(body []byte, key string) ([]json.RawMessage, error) {
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	var out []json.RawMessage
	if raw, ok := answer[key]; ok {
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", key, err)
		}
	}
	return out, nil
}

// objectOf decodes an object keeping its numbers as written (a uint64
// limit survives the trip back).
func objectOf(raw json.RawMessage) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var obj map[string]any
	if err := d.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("decoding an object: %v", err)
	}
	return obj, nil
}

// setIn sets obj[path[0]][path[1]]...= v, making the objects on the way.
func setIn(obj map[string]any, v any, path ...string) {
	for _, k := range path[:len(path)-1] {
		next, ok := obj[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[k] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = v
}
