// Package v0042 speaks slurmrestd's REST API v0.0.42 (Slurm 24.11, 25.05,
// 25.11). It is the only package that sees generated types: it turns them
// into the version-neutral model and slurmrestd's answers into typed errors.
package v0042

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	gen "github.com/onepool/onepool/slurmrest/internal/gen/v0042"
	"github.com/onepool/onepool/slurmrest/model"
)

const (
	apiPrefix = "/slurm/v0.0.42"
	// maxBody bounds what one response may hold: a full /jobs listing of a
	// big cluster is tens of MB; a runaway answer is not read without end.
	maxBody = 512 << 20
)

// Backend implements model.Backend over the generated client.
type Backend struct {
	c *gen.Client

	mu sync.Mutex
	// nodesSeen is the newest node update time a listing has shown. A
	// delta asked from before it must answer "changed", and 24.11.5 says
	// so with a 500 (see ListNodes): such a poll lists in full at once.
	nodesSeen time.Time
}

var _ model.Backend = (*Backend)(nil)

// New returns a backend for the slurmrestd at server, calling it with hc
// (which adds the token and the deadline).
func New(server string, hc *http.Client) (*Backend, error) {
	c, err := gen.NewClient(server, gen.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("slurmrest v0.0.42 client: %w", err)
	}
	return &Backend{c: c}, nil
}

// envelope is what every v0.0.42 answer carries besides its data.
type envelope struct {
	Errors []gen.V0042OpenapiError `json:"errors"`
}

// response is one answer of slurmrestd, read in full.
type response struct {
	status int
	body   []byte
}

// call sends one request and reads the answer. A transport failure, an HTTP
// status that is not 2xx/304, or an `errors` array that is not empty (even
// with HTTP 200) become an *model.APIError.
func call(ctx context.Context, op, endpoint string, send func(context.Context) (*http.Response, error)) (*response, error) {
	resp, err := send(ctx)
	if err != nil {
		kind := model.ErrUnreachable
		if errors.Is(err, model.ErrNoToken) {
			kind = model.ErrUnauthenticated
		}
		return nil, &model.APIError{Op: op, Endpoint: endpoint, Kind: kind, Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, &model.APIError{Op: op, Endpoint: endpoint, StatusCode: resp.StatusCode, Kind: model.ErrUnreachable,
			Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if len(body) > maxBody {
		return nil, &model.APIError{Op: op, Endpoint: endpoint, StatusCode: resp.StatusCode, Kind: model.ErrBadResponse,
			Err: fmt.Errorf("answer larger than %d bytes", maxBody)}
	}
	r := &response{status: resp.StatusCode, body: body}
	if r.status == http.StatusNotModified {
		return r, nil
	}
	return r, check(op, endpoint, r)
}

// check turns an answer that reports failure into an *model.APIError.
func check(op, endpoint string, r *response) error {
	errs, decodeErr := decodeErrors(r.body)
	ok := r.status >= 200 && r.status < 300
	if ok && decodeErr != nil {
		return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: r.status, Kind: model.ErrBadResponse, Err: decodeErr}
	}
	if ok && len(errs) == 0 {
		return nil
	}
	return &model.APIError{Op: op, Endpoint: endpoint, StatusCode: r.status, Errors: errs, Kind: model.Classify(r.status, errs)}
}

func decodeErrors(body []byte) ([]model.SlurmError, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty answer")
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	out := make([]model.SlurmError, 0, len(env.Errors))
	for _, e := range env.Errors {
		out = append(out, model.SlurmError{
			Errno: int(deref(e.ErrorNumber)), Error: deref(e.Error), Description: deref(e.Description), Source: deref(e.Source),
		})
	}
	return out, nil
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
func unixTime(v *gen.V0042Uint64NoValStruct) time.Time {
	if v == nil || v.Number == nil || *v.Number <= 0 || (v.Set != nil && !*v.Set) || deref(v.Infinite) {
		return time.Time{}
	}
	return time.Unix(*v.Number, 0)
}

func updateTime(since time.Time) *string {
	if since.IsZero() {
		return nil
	}
	return ptr(strconv.FormatInt(since.Unix(), 10))
}

func u32(v *gen.V0042Uint32NoValStruct) uint32 {
	if v == nil || v.Number == nil || (v.Set != nil && !*v.Set) {
		return 0
	}
	return uint32(*v.Number)
}
