// Package rest speaks slurmrestd's REST API in the versions onepool
// knows (v0.0.42: Slurm 24.11 to 25.11; v0.0.44: Slurm 25.11 to 26.05).
// Every field onepool uses has the same JSON in all of them (wire.go,
// checked against each version's generated types), so one Backend serves
// them all: a version is its path prefix. It turns slurmrestd's answers
// into the version-neutral model and into typed errors.
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// Versions are the API versions this package speaks, newest first.
var Versions = []string{"v0.0.44", "v0.0.42"}

// maxBody bounds what one response may hold: a full /jobs listing of a big
// cluster is tens of MB; a runaway answer is not read without end.
const maxBody = 512 << 20

// Backend implements model.Backend in one API version: the one it was
// told, or else the newest both sides speak, asked of slurmrestd before
// its first call (Negotiate).
type Backend struct {
	server string // scheme://host:port
	hc     *http.Client

	mu      sync.Mutex
	version string // "" until negotiated
	forced  bool   // version was given, not negotiated
}

var _ model.Backend = (*Backend)(nil)

// New returns a backend for the slurmrestd at server, calling it with hc
// (which adds the token and the deadline). version forces an API version;
// empty, the backend negotiates one before its first call.
func New(server, version string, hc *http.Client) (*Backend, error) {
	if version != "" && !slices.Contains(Versions, version) {
		return nil, fmt.Errorf("slurmrest: API version %q: onepool speaks %s", version, strings.Join(Versions, ", "))
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("slurmrest: server %q: want scheme://host:port", server)
	}
	return &Backend{server: strings.TrimSuffix(server, "/"), version: version, forced: version != "", hc: hc}, nil
}

// Version is the API version the backend speaks, "" before negotiation.
func (b *Backend) Version() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version
}

// endpoint names an operation for errors and metrics: "GET /slurm/v0.0.42/nodes/".
func (b *Backend) endpoint(method, path string) string {
	return method + " /slurm/" + b.Version() + path
}

// dbEndpoint is endpoint for slurmdbd's paths: "GET /slurmdb/v0.0.42/qos/".
func (b *Backend) dbEndpoint(method, path string) string {
	return method + " /slurmdb/" + b.Version() + path
}

// request is one call: path is after /slurm/<version> (/slurmdb/<version>
// with db) and may hold {placeholders} that args fill (escaped) in order.
type request struct {
	op, method, path string
	args             []string
	query            url.Values
	body             any
	// db: one of slurmdbd's endpoints (slurmrestd's openapi/slurmdbd plugin).
	db bool
	// elem, when set, reads a successful answer as a stream: each element
	// of the array under streamKey goes to elem as it arrives, the other
	// members to response.members; the body is never held whole.
	streamKey string
	elem      func(*json.Decoder) error
}

// root is the request's path prefix: "/slurm/" or "/slurmdb/".
func (rq request) root() string {
	if rq.db {
		return "/slurmdb/"
	}
	return "/slurm/"
}

// response is one answer of slurmrestd: read in full (body), or streamed
// (members: what is left of it once its array went to request.elem).
type response struct {
	status  int
	body    []byte
	members members
}

// call sends one request and reads the answer. A transport failure, an HTTP
// status that is not 2xx/304, or an `errors` array that is not empty (even
// with HTTP 200) become an *model.APIError.
func (b *Backend) call(ctx context.Context, rq request) (*response, error) {
	version, err := b.Negotiate(ctx)
	if err != nil {
		return nil, err
	}
	ep := rq.method + " " + rq.root() + version + rq.path
	path := rq.path
	for _, a := range rq.args {
		i, j := strings.Index(path, "{"), strings.Index(path, "}")
		if i < 0 || j < i {
			return nil, fmt.Errorf("slurmrest: %s: more arguments than placeholders", ep)
		}
		path = path[:i] + url.PathEscape(a) + path[j+1:]
	}
	target := b.server + rq.root() + version + path
	if len(rq.query) > 0 {
		target += "?" + rq.query.Encode()
	}
	var body io.Reader
	if rq.body != nil {
		raw, err := json.Marshal(rq.body)
		if err != nil {
			return nil, fmt.Errorf("slurmrest: %s: %w", rq.op, err)
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, target, body)
	if err != nil {
		return nil, &model.APIError{Op: rq.op, Endpoint: ep, Kind: model.ErrUnreachable, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Asked for JSON by name, slurmrestd answers it compact; a request
	// without Accept gets it pretty-printed, a third more bytes to send
	// and decode (10,000 nodes on 24.11: 23.4 against 14.7 MB).
	req.Header.Set("Accept", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		kind := model.ErrUnreachable
		if errors.Is(err, model.ErrNoToken) {
			kind = model.ErrUnauthenticated
		}
		return nil, &model.APIError{Op: rq.op, Endpoint: ep, Kind: kind, Err: err}
	}
	defer resp.Body.Close()
	if rq.elem != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return streamed(rq, ep, resp)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, &model.APIError{Op: rq.op, Endpoint: ep, StatusCode: resp.StatusCode, Kind: model.ErrUnreachable,
			Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if len(raw) > maxBody {
		return nil, &model.APIError{Op: rq.op, Endpoint: ep, StatusCode: resp.StatusCode, Kind: model.ErrBadResponse,
			Err: fmt.Errorf("answer larger than %d bytes", maxBody)}
	}
	r := &response{status: resp.StatusCode, body: raw}
	if r.status == http.StatusNotFound && dataParser(raw) == "" && !rq.db {
		// Not the version's "no such job": slurmrestd has no such path.
		// (A /slurmdb/ path missing says only that slurmrestd runs
		// without its openapi/slurmdbd plugin: the version stands.)
		b.forget(version)
	}
	if r.status == http.StatusNotModified {
		return r, nil
	}
	return r, check(rq.op, ep, r)
}

// streamed reads a successful answer as rq asks (request.elem). A read
// that fails halfway is the transport's failure; an answer that is not the
// JSON asked for is a bad response; an `errors` array in it fails the call
// as check does.
func streamed(rq request, ep string, resp *http.Response) (*response, error) {
	cr := &countingReader{r: io.LimitReader(resp.Body, maxStreamBody+1)}
	m, err := decodeStream(cr, rq.streamKey, rq.elem)
	r := &response{status: resp.StatusCode, members: m}
	switch {
	case cr.n > maxStreamBody:
		return nil, badResponse(rq.op, ep, r, "answer larger than %d bytes", maxStreamBody)
	case cr.err != nil:
		return nil, &model.APIError{Op: rq.op, Endpoint: ep, StatusCode: r.status, Kind: model.ErrUnreachable,
			Err: fmt.Errorf("reading the answer: %w", cr.err)}
	case err != nil:
		return nil, badResponse(rq.op, ep, r, "decoding the answer: %w", err)
	}
	var errs []apiError
	if raw, ok := m["errors"]; ok {
		if err := json.Unmarshal(raw, &errs); err != nil {
			return nil, badResponse(rq.op, ep, r, "decoding the answer's errors: %w", err)
		}
	}
	return r, verdict(rq.op, ep, r.status, slurmErrors(errs), nil)
}

// check turns an answer that reports failure into an *model.APIError.
func check(op, endpoint string, r *response) error {
	errs, decodeErr := DecodeErrors(r.body)
	return verdict(op, endpoint, r.status, errs, decodeErr)
}

// verdict is what an answer of status with errs (or that could not be
// decoded) means: nil for success, else an *model.APIError.
func verdict(op, endpoint string, status int, errs []model.SlurmError, decodeErr error) error {
	ok := status >= 200 && status < 300
	if ok && decodeErr != nil {
		return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: status, Kind: model.ErrBadResponse, Err: decodeErr}
	}
	if ok && len(errs) == 0 {
		return nil
	}
	return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: status, Errors: errs, Kind: model.Classify(status, errs)}
}

// DecodeErrors reads an answer's `errors` array.
func DecodeErrors(body []byte) ([]model.SlurmError, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty answer")
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	return slurmErrors(env.Errors), nil
}

func slurmErrors(errs []apiError) []model.SlurmError {
	out := make([]model.SlurmError, 0, len(errs))
	for _, e := range errs {
		out = append(out, model.SlurmError{
			Errno: int(deref(e.ErrorNumber)), Error: deref(e.Error), Description: deref(e.Description), Source: deref(e.Source),
		})
	}
	return out
}

// decode reads the data part of a successful answer into v.
func decode(op, endpoint string, r *response, v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: r.status, Kind: model.ErrBadResponse,
			Err: fmt.Errorf("decoding the answer: %w", err)}
	}
	return nil
}

func badResponse(op, endpoint string, r *response, format string, a ...any) error {
	return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: r.status, Kind: model.ErrBadResponse, Err: fmt.Errorf(format, a...)}
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// unixTime reads Slurm's {set, infinite, number} seconds; unset or 0 is the zero time.
func unixTime(v *noVal64) time.Time {
	if v == nil || v.Number == nil || *v.Number <= 0 || (v.Set != nil && !*v.Set) || deref(v.Infinite) {
		return time.Time{}
	}
	return time.Unix(*v.Number, 0)
}

// sinceQuery is the update_time parameter of a delta listing.
func sinceQuery(since time.Time) url.Values {
	if since.IsZero() {
		return nil
	}
	return url.Values{"update_time": {strconv.FormatInt(since.Unix(), 10)}}
}

func u32(v *noVal32) uint32 {
	if v == nil || v.Number == nil || (v.Set != nil && !*v.Set) || *v.Number < 0 {
		return 0
	}
	return uint32(*v.Number)
}

// fromMinutes reads a limit in minutes; infinite and unset are zero.
func fromMinutes(v *noVal32) time.Duration {
	if v == nil || deref(v.Infinite) {
		return 0
	}
	return time.Duration(u32(v)) * time.Minute
}

func number(n int64) *noVal32 { return &noVal32{Set: ptr(true), Number: &n} }
