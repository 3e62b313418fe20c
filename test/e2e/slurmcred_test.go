package e2e

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// problems collects what a client's OnTokenProblem hears.
type problems struct {
	mu   sync.Mutex
	seen []slurmrest.TokenProblem
}

func (p *problems) hook(tp slurmrest.TokenProblem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, tp)
}

func (p *problems) kinds() []slurmrest.TokenProblemKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	var k []slurmrest.TokenProblemKind
	for _, tp := range p.seen {
		k = append(k, tp.Kind)
	}
	return k
}

// onepool mints its own short-lived tokens from the cluster's JWT key, and
// the real slurmctld and slurmrestd take them: no 90-day token made by
// hand. A token that expires within a day, or one Slurm refuses, is told;
// slurmrestd behind TLS is trusted only through the CA bundle given.
func TestSlurmCredentials(t *testing.T) {
	l := lab.Shared(t)
	ctx := context.Background()

	t.Run("minted tokens from the JWT key", func(t *testing.T) {
		var told problems
		c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), JWTKeyFile: l.JWTKeyFile(), TokenUser: "slurm",
			TokenLifetime: 5 * time.Minute, Timeout: 10 * time.Second, OnTokenProblem: told.hook})
		require.NoError(t, err)
		nodes, err := c.ListNodes(ctx, time.Time{})
		require.NoError(t, err)
		assert.Len(t, nodes.Nodes, len(l.NodeNames()))
		own, err := c.OwnUser()
		require.NoError(t, err)
		assert.Equal(t, "slurm", own)
		// As SlurmUser the minted token may act as a user: the job is alice's.
		id, err := c.SubmitJob(slurmrest.AsUser(ctx, "alice"), sleepJob(uniqueName("e2e-minted"), 0))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.CancelJob(context.Background(), id) })
		job, err := c.GetJob(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "alice", job.User)
		assert.Empty(t, told.kinds(), "a fresh minted token is no problem")
	})

	t.Run("a key slurmctld does not have is refused and told", func(t *testing.T) {
		key := filepath.Join(t.TempDir(), "jwt_hs256.key")
		require.NoError(t, os.WriteFile(key, []byte("not the cluster's key, 32 bytes!"), 0o600))
		var told problems
		c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), JWTKeyFile: key, TokenUser: "slurm", Timeout: 10 * time.Second, OnTokenProblem: told.hook})
		require.NoError(t, err)
		_, err = c.ListNodes(ctx, time.Time{})
		require.ErrorIs(t, err, slurmrest.ErrUnauthenticated)
		assert.Equal(t, []slurmrest.TokenProblemKind{slurmrest.TokenRefused}, told.kinds())
	})

	t.Run("a token that expires within a day is told", func(t *testing.T) {
		tok, err := l.MintToken(ctx, "slurm", 2*time.Hour)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(file, []byte(tok), 0o600))
		var told problems
		c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: file, Timeout: 10 * time.Second, OnTokenProblem: told.hook})
		require.NoError(t, err)
		_, err = c.ListNodes(ctx, time.Time{})
		require.NoError(t, err, "the token still works")
		require.Equal(t, []slurmrest.TokenProblemKind{slurmrest.TokenExpiring}, told.kinds())
		told.mu.Lock()
		msg := told.seen[0].Message
		told.mu.Unlock()
		assert.Contains(t, msg, "expires")
		assert.NotContains(t, msg, tok)
	})

	t.Run("slurmrestd behind TLS, trusted by its CA alone", func(t *testing.T) {
		// A TLS proxy in front of the real slurmrestd, as a platform team
		// puts one (slurmrestd's own TLS needs Slurm 25.05's tls plugin).
		backend, err := url.Parse(l.RESTURL())
		require.NoError(t, err)
		proxy := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(backend))
		t.Cleanup(proxy.Close)
		ca := filepath.Join(t.TempDir(), "ca.pem")
		require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}), 0o600))

		c, err := slurmrest.New(slurmrest.Config{URL: proxy.URL, JWTKeyFile: l.JWTKeyFile(), TokenUser: "slurm", CAFile: ca, Timeout: 10 * time.Second})
		require.NoError(t, err)
		_, err = c.ListNodes(ctx, time.Time{})
		require.NoError(t, err)

		untrusting, err := slurmrest.New(slurmrest.Config{URL: proxy.URL, JWTKeyFile: l.JWTKeyFile(), TokenUser: "slurm", Timeout: 10 * time.Second})
		require.NoError(t, err)
		_, err = untrusting.ListNodes(ctx, time.Time{})
		require.Error(t, err, "a certificate no CA given signs was trusted")
		assert.True(t, strings.Contains(err.Error(), "certificate") || errors.Is(err, slurmrest.ErrUnreachable), "%v", err)
	})
}
