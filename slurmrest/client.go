// Package slurmrest is onepool's only door to Slurm: a client for slurmrestd
// with version-neutral types, typed errors and a deadline on every call, and
// a Cache that keeps a cluster-wide view of nodes and jobs current.
package slurmrest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onepool/onepool/slurmrest/internal/rest"
	"github.com/onepool/onepool/slurmrest/model"
)

// The version-neutral types, re-exported so callers import one package.
type (
	Node          = model.Node
	NodeState     = model.NodeState
	NodeList      = model.NodeList
	NodeUpdate    = model.NodeUpdate
	Job           = model.Job
	JobState      = model.JobState
	JobList       = model.JobList
	JobStateEntry = model.JobStateEntry
	JobSubmit     = model.JobSubmit
	JobUpdate     = model.JobUpdate
	JobSharing    = model.JobSharing
	Partition     = model.Partition
	APIError      = model.APIError
	SlurmError    = model.SlurmError

	QOS               = model.QOS
	QOSUpdate         = model.QOSUpdate
	TRES              = model.TRES
	Account           = model.Account
	Association       = model.Association
	AssociationUpdate = model.AssociationUpdate
)

// QOS preempt modes, re-exported.
const (
	PreemptModeCluster = model.PreemptModeCluster
	PreemptModeCancel  = model.PreemptModeCancel
	PreemptModeRequeue = model.PreemptModeRequeue
)

// PreemptModes are the QOS preempt modes onepool sets.
var PreemptModes = model.PreemptModes

// ParseTRES reads "gres/gpu=8,cpu=64" (-1: no limit).
func ParseTRES(s string) ([]TRES, error) { return model.ParseTRES(s) }

// FormatTRES writes a TRES list as Slurm does, sorted.
func FormatTRES(ts []TRES) string { return model.FormatTRES(ts) }

// Job and node states, re-exported.
const (
	UnlimitedTime = model.UnlimitedTime

	JobPending   = model.JobPending
	JobRunning   = model.JobRunning
	JobCompleted = model.JobCompleted
	JobCancelled = model.JobCancelled
	JobFailed    = model.JobFailed
	NodeIdle     = model.NodeIdle
	NodeDown     = model.NodeDown

	SharingDefault   = model.SharingDefault
	SharingExclusive = model.SharingExclusive
	SharingUser      = model.SharingUser
)

// Slurm error numbers of a refused submission, re-exported.
const (
	ErrnoInvalidPartition      = model.ErrnoInvalidPartition
	ErrnoTooManyCPUs           = model.ErrnoTooManyCPUs
	ErrnoInvalidNodeCount      = model.ErrnoInvalidNodeCount
	ErrnoNotTopPriority        = model.ErrnoNotTopPriority
	ErrnoNodeConfigUnavailable = model.ErrnoNodeConfigUnavailable
	ErrnoNodesBusy             = model.ErrnoNodesBusy
	ErrnoPartConfigUnavailable = model.ErrnoPartConfigUnavailable
	ErrnoInvalidAccount        = model.ErrnoInvalidAccount
	ErrnoAccountingPolicy      = model.ErrnoAccountingPolicy
	ErrnoInvalidTimeLimit      = model.ErrnoInvalidTimeLimit
	ErrnoInvalidQOS            = model.ErrnoInvalidQOS
	ErrnoPartitionNotAvail     = model.ErrnoPartitionNotAvail
	ErrnoInvalidGRES           = model.ErrnoInvalidGRES
)

// Error kinds; match them with errors.Is.
var (
	ErrUnauthenticated = model.ErrUnauthenticated
	ErrForbidden       = model.ErrForbidden
	ErrNotFound        = model.ErrNotFound
	ErrAlreadyInState  = model.ErrAlreadyInState
	ErrUnreachable     = model.ErrUnreachable
	ErrBadResponse     = model.ErrBadResponse
	ErrSlurm           = model.ErrSlurm
	ErrStale           = model.ErrStale
	ErrNoToken         = model.ErrNoToken
	// ErrUnsupportedVersion: slurmrestd serves no API version onepool speaks.
	ErrUnsupportedVersion = model.ErrUnsupportedVersion
	// ErrNotWatched: a cache read of a kind it does not list.
	ErrNotWatched = model.ErrNotWatched
)

// APIVersions are the slurmrestd API versions onepool speaks, newest first.
var APIVersions = rest.Versions

// Config says how to reach slurmrestd.
type Config struct {
	// URL of slurmrestd, e.g. http://127.0.0.1:6820.
	URL string
	// TokenFile holds the JWT; it is re-read when it changes. Either it
	// or JWTKeyFile.
	TokenFile string
	// JWTKeyFile holds the cluster's HS256 JWT key (slurmctld's and
	// slurmrestd's jwt_hs256.key): the client mints its own short-lived
	// tokens for TokenUser, renewed before they expire (KeyToken).
	JWTKeyFile string
	// TokenUser is the Slurm user minted tokens are for (with JWTKeyFile);
	// acting as other users (X-SLURM-USER-NAME) needs SlurmUser or root.
	TokenUser string
	// TokenLifetime of each minted token (DefaultTokenLifetime).
	TokenLifetime time.Duration
	// CAFile holds the PEM CA bundle that signs slurmrestd's (or its TLS
	// proxy's) certificate, for an https URL; empty: the system's roots.
	CAFile string
	// OnTokenProblem hears, at most once an hour each, that the token
	// expires within a day or that slurmrestd refused it. It must not block.
	OnTokenProblem func(TokenProblem)
	// User, when set, is sent as X-SLURM-USER-NAME (an admin token acting
	// as another user).
	User string
	// APIVersion forces a REST API version (one of APIVersions); empty,
	// the client speaks the newest slurmrestd serves, asked before its
	// first request.
	APIVersion string
	// Timeout bounds every request (10 s) but the cache's job listings,
	// which it gives the time their size takes (CacheConfig.JobListPerJob).
	Timeout time.Duration
	// JobStatesBatch is how many job ids go in one /jobs/state request (500).
	JobStatesBatch int
	// Registerer receives the Prometheus series; nil registers none.
	Registerer prometheus.Registerer
	// Transport replaces http.DefaultTransport (tests).
	Transport http.RoundTripper
}

// Client calls slurmrestd. It is safe for concurrent use.
type Client struct {
	backend *rest.Backend
	metrics *metrics
	timeout time.Duration
	batch   int
	token   TokenSource
	user    string
}

// New checks cfg and returns a client; it makes no request.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("slurmrest: URL %q: want http(s)://host:port", cfg.URL)
	}
	tok, source, err := tokenSource(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.JobStatesBatch <= 0 {
		cfg.JobStatesBatch = 500
	}
	base, err := baseTransport(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: metrics: %w", err)
	}
	hc := &http.Client{
		Transport: &transport{base: base, token: tok, watch: newTokenWatch(m, cfg.OnTokenProblem, source, cfg.JWTKeyFile != ""), user: cfg.User, metrics: m},
		// No Timeout here: each call's context carries its deadline.
		// A redirect would carry the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	b, err := rest.New(u.String(), cfg.APIVersion, hc)
	if err != nil {
		return nil, err
	}
	return &Client{backend: b, metrics: m, timeout: cfg.Timeout, batch: cfg.JobStatesBatch, token: tok, user: cfg.User}, nil
}

// tokenSource is the token the config names, and where a new one comes
// from (for messages).
func tokenSource(cfg Config) (TokenSource, string, error) {
	switch {
	case cfg.TokenFile != "" && cfg.JWTKeyFile != "":
		return nil, "", errors.New("slurmrest: a token file and a JWT key both configured; want one")
	case cfg.TokenFile != "":
		return NewFileToken(cfg.TokenFile), "token file " + cfg.TokenFile, nil
	case cfg.JWTKeyFile != "":
		life := cfg.TokenLifetime
		if life == 0 {
			life = DefaultTokenLifetime
		}
		k, err := NewKeyToken(cfg.JWTKeyFile, cfg.TokenUser, life)
		return k, "JWT key " + cfg.JWTKeyFile, err
	}
	return nil, "", errors.New("slurmrest: no token file or JWT key configured")
}

// baseTransport is the transport requests go through: cfg.Transport, else
// Go's default, trusting cfg.CAFile's CAs when it names one.
func baseTransport(cfg Config) (http.RoundTripper, error) {
	if cfg.CAFile == "" {
		if cfg.Transport != nil {
			return cfg.Transport, nil
		}
		return http.DefaultTransport, nil
	}
	if cfg.Transport != nil {
		return nil, errors.New("slurmrest: a CA file and a transport both configured")
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("slurmrest: CA bundle %s holds no PEM certificate", cfg.CAFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// OwnUser is the Slurm user this client's requests act as when they name
// none (AsUser): Config.User, else the user the token was made for (its
// "sun" claim). The token itself never leaves the client.
func (c *Client) OwnUser() (string, error) {
	if c.user != "" {
		return c.user, nil
	}
	t, err := c.token.Token()
	if err != nil {
		return "", err
	}
	return TokenUser(t)
}

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// APIVersion returns the REST API version the client speaks, asking
// slurmrestd first when none was forced and none asked yet. An error
// wrapping ErrUnsupportedVersion names what slurmrestd offers.
func (c *Client) APIVersion(ctx context.Context) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.Negotiate(ctx)
}

// Ping checks that slurmrestd answers and reaches slurmctld.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.Ping(ctx)
}

// ListNodes lists every node; with a non-zero since it returns nil, nil when
// nothing changed after since.
func (c *Client) ListNodes(ctx context.Context, since time.Time) (*NodeList, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListNodes(ctx, since)
}

// GetNode reads one node; ErrNotFound when Slurm has none of that name.
func (c *Client) GetNode(ctx context.Context, name string) (*Node, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.GetNode(ctx, name)
}

// Drain sets DRAIN on a node with reason; Slurm starts nothing new there.
func (c *Client) Drain(ctx context.Context, name, reason string) error {
	if reason == "" {
		return errors.New("slurmrest: drain needs a reason")
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.UpdateNode(ctx, name, NodeUpdate{State: []string{"DRAIN"}, Reason: reason})
}

// Resume clears DRAIN (or DOWN). Slurm refuses a resume it finds no
// transition for (error 2028 on 24.11, 2180 on 26.05) whether the node was
// not drained or it cannot leave its state: the node is read back, and the
// resume is done only if it is neither drained nor down. Otherwise the
// refusal is an ErrSlurm naming the state the node is still in.
func (c *Client) Resume(ctx context.Context, name string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	err := c.backend.UpdateNode(ctx, name, NodeUpdate{State: []string{"RESUME"}})
	var ae *APIError
	if !errors.As(err, &ae) || !errors.Is(ae.Kind, ErrAlreadyInState) {
		return err
	}
	refused := *ae
	refused.Kind = ErrSlurm
	n, gerr := c.backend.GetNode(ctx, name)
	switch {
	case gerr != nil:
		refused.Err = fmt.Errorf("reading the node back: %w", gerr)
		return &refused
	case n.State.Drain() || n.State.Base() == NodeDown:
		refused.Err = fmt.Errorf("the node is still %s", strings.Join(n.State, "+"))
		return &refused
	}
	return nil
}

// SetFeatures makes features a node's available and active features (as
// `scontrol update nodename=... availablefeatures=... activefeatures=...`).
func (c *Client) SetFeatures(ctx context.Context, name string, features []string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.UpdateNode(ctx, name, NodeUpdate{Features: &features})
}

// UpdateNodes applies one update to many nodes in one request.
func (c *Client) UpdateNodes(ctx context.Context, names []string, u NodeUpdate) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.UpdateNodes(ctx, names, u)
}

// DeleteNode removes a dynamic node from Slurm. Slurm refuses while jobs
// run on it; a node Slurm does not know gives ErrNotFound.
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.DeleteNode(ctx, name)
}

// ListJobs lists every job Slurm still holds, like ListNodes.
func (c *Client) ListJobs(ctx context.Context, since time.Time) (*JobList, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListJobs(ctx, since, nil)
}

// GetJob reads one job; ErrNotFound once Slurm has purged it.
func (c *Client) GetJob(ctx context.Context, id uint32) (*Job, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.GetJob(ctx, id)
}

// JobStates returns the states of ids from the light /jobs/state listing, in
// batches; ids Slurm does not know are absent from the answer.
func (c *Client) JobStates(ctx context.Context, ids []uint32) ([]JobStateEntry, error) {
	var out []JobStateEntry
	for start := 0; start < len(ids); start += c.batch {
		end := min(start+c.batch, len(ids))
		bctx, cancel := c.ctx(ctx)
		got, err := c.backend.JobStates(bctx, ids[start:end])
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// AllJobStates lists the id and state of every job Slurm holds: a few dozen
// bytes a job where a full record is about ten kilobytes.
func (c *Client) AllJobStates(ctx context.Context) ([]JobStateEntry, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.AllJobStates(ctx)
}

// SubmitJob submits a batch job and returns its id.
func (c *Client) SubmitJob(ctx context.Context, j JobSubmit) (uint32, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.SubmitJob(ctx, j)
}

// AllocateNow asks for an allocation (no script) that Slurm grants inside
// the request or refuses at once with an *APIError (ErrSlurm: e.g. 2016,
// nodes busy): salloc --immediate. A granted allocation holds its resources
// until it is cancelled or reaches its time limit.
func (c *Client) AllocateNow(ctx context.Context, j JobSubmit) (uint32, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.AllocateNow(ctx, j)
}

// UpdateJob changes a job.
func (c *Client) UpdateJob(ctx context.Context, id uint32, u JobUpdate) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.UpdateJob(ctx, id, u)
}

// CancelJob cancels a job (scancel).
func (c *Client) CancelJob(ctx context.Context, id uint32) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.CancelJob(ctx, id, "")
}

// SignalJob sends a signal (e.g. "SIGTERM") to a job's processes.
func (c *Client) SignalJob(ctx context.Context, id uint32, signal string) error {
	if signal == "" {
		return errors.New("slurmrest: signal needs a name")
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.CancelJob(ctx, id, signal)
}

// ListPartitions lists the partitions.
func (c *Client) ListPartitions(ctx context.Context) ([]Partition, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListPartitions(ctx)
}

// Accounting: slurmdbd's QOS, accounts and associations, through
// slurmrestd's /slurmdb/ endpoints (its openapi/slurmdbd plugin; a
// slurmrestd without it answers 404: ErrNotFound). Changing them needs an
// operator's or admin's token (SlurmUser's is one).

// ListClusters lists the clusters slurmdbd knows; a slurmctld registers its
// own when it first reaches slurmdbd.
func (c *Client) ListClusters(ctx context.Context) ([]string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListClusters(ctx)
}

// ListQOS lists every QOS.
func (c *Client) ListQOS(ctx context.Context) ([]QOS, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListQOS(ctx)
}

// SetQOS makes the QOS with u's fields when it is missing (true), else sets
// u's fields on it and leaves every other setting as it is. The QOS a new
// one preempts must exist first.
func (c *Client) SetQOS(ctx context.Context, name string, u QOSUpdate) (bool, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.SetQOS(ctx, name, u)
}

// ListAssociations lists a cluster's associations: each account's (User
// empty) and each user's.
func (c *Client) ListAssociations(ctx context.Context, cluster string) ([]Association, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.ListAssociations(ctx, cluster)
}

// AddAccount makes an account, when missing, and its association on the
// cluster; what exists is left as it is.
func (c *Client) AddAccount(ctx context.Context, cluster string, a Account) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.AddAccount(ctx, cluster, a)
}

// AddUserAssociation makes a user's association (and the user, when
// missing) with its QOS and default QOS. slurmdbd makes nothing, and says
// nothing, for an association that exists or names an account or QOS it
// does not know: read the associations back.
func (c *Client) AddUserAssociation(ctx context.Context, a Association) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.AddUserAssociation(ctx, a)
}

// UpdateAssociation sets u's fields on an association (key: cluster,
// account, user, partition) and leaves every other setting as it is;
// ErrNotFound when there is none.
func (c *Client) UpdateAssociation(ctx context.Context, key Association, u AssociationUpdate) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.backend.UpdateAssociation(ctx, key, u)
}
