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
	seen := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
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
