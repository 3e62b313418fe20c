package slurmrest

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// transport adds the token to each request and counts requests, bytes and
// latency per endpoint. It clones the request: the caller's never holds the token.
type transport struct {
	base    http.RoundTripper
	token   TokenSource
	watch   *tokenWatch
	user    string
	metrics *metrics
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	endpoint := endpointLabel(req.Method, req.URL.Path)
	tok, err := t.token.Token()
	if err != nil {
		t.metrics.requests.WithLabelValues(endpoint, "error").Inc()
		return nil, err
	}
	t.watch.seen(tok)
	r := req.Clone(req.Context())
	r.Header.Set("X-SLURM-USER-TOKEN", tok)
	if u := userFrom(req.Context(), t.user); u != "" {
		r.Header.Set("X-SLURM-USER-NAME", u)
	}
	start := time.Now()
	resp, err := t.base.RoundTrip(r)
	t.metrics.duration.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	if err != nil {
		t.metrics.requests.WithLabelValues(endpoint, "error").Inc()
		return nil, err
	}
	t.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(resp.StatusCode)).Inc()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusNetworkAuthenticationRequired {
		t.watch.refused(resp.StatusCode)
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, add: t.metrics.responseBytes.WithLabelValues(endpoint).Add}
	return resp, nil
}

type userKey struct{}

// AsUser returns a context whose requests act as Slurm user name: sent as
// X-SLURM-USER-NAME with the client's token, which Slurm accepts only
// from a token of SlurmUser or root (an authenticating proxy, as Slurm's
// REST documentation calls it). The job a submission makes is then that
// user's: its associations, limits, fair share and accounting. Empty:
// the client's own user.
func AsUser(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, userKey{}, name)
}

func userFrom(ctx context.Context, fallback string) string {
	if u, _ := ctx.Value(userKey{}).(string); u != "" {
		return u
	}
	return fallback
}

type countingBody struct {
	io.ReadCloser
	add func(float64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.add(float64(n))
	}
	return n, err
}

// endpointLabel turns a path into a label with bounded values: names and ids
// become placeholders ("GET /node/{name}").
func endpointLabel(method, path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /slurm/v0.0.42/<kind>/<id>[/...]
	if len(parts) >= 3 && parts[0] == "slurm" {
		parts = parts[2:]
	}
	switch {
	case len(parts) >= 2 && parts[0] == "node":
		parts = []string{"node", "{name}"}
	case len(parts) >= 2 && parts[0] == "job" && parts[1] != "submit" && parts[1] != "allocate":
		parts = []string{"job", "{id}"}
	}
	return method + " /" + strings.Join(parts, "/")
}
