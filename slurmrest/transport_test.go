package slurmrest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request made AsUser carries that user beside the token (Slurm's
// authenticating proxy); others carry the client's own user, or none.
func TestAsUserSendsTheUserNameHeader(t *testing.T) {
	srv, tokenFile, seen := headerServer(t)
	for _, tc := range []struct {
		name, clientUser, ctxUser, want string
	}{
		{"as a team", "", "team-b", "team-b"},
		{"the client's own", "", "", ""},
		{"a team over the client's user", "onepool", "team-a", "team-a"},
		{"the client's user", "onepool", "", "onepool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{URL: srv.URL, TokenFile: tokenFile, Timeout: 2 * time.Second, APIVersion: "v0.0.42", User: tc.clientUser})
			require.NoError(t, err)
			_, _ = c.GetJob(AsUser(context.Background(), tc.ctxUser), 7)
			h := <-seen
			assert.Equal(t, tc.want, h.Get("X-SLURM-USER-NAME"))
			assert.Equal(t, testToken, h.Get("X-SLURM-USER-TOKEN"))
		})
	}
}

// Every request asks for JSON by name: slurmrestd pretty-prints an answer
// to a request without Accept, a third more bytes (issue 38).
func TestRequestsAskForCompactJSON(t *testing.T) {
	srv, tokenFile, seen := headerServer(t)
	c, err := New(Config{URL: srv.URL, TokenFile: tokenFile, Timeout: 2 * time.Second, APIVersion: "v0.0.42"})
	require.NoError(t, err)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"list nodes": func() error { _, err := c.ListNodes(ctx, time.Time{}); return err },
		"get job":    func() error { _, err := c.GetJob(ctx, 7); return err },
		"drain":      func() error { return c.Drain(ctx, "n1", "test") },
	} {
		require.Error(t, call(), name)
		assert.Equal(t, "application/json", (<-seen).Get("Accept"), name)
	}
}

// headerServer answers every request with HTTP 500 and hands over its
// headers; tokenFile holds testToken.
func headerServer(t *testing.T) (srv *httptest.Server, tokenFile string, seen <-chan http.Header) {
	t.Helper()
	ch := make(chan http.Header, 4)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- r.Header.Clone()
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	tokenFile = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	return srv, tokenFile, ch
}
