package slurmrest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verifyHS256 checks a token as slurmctld does with its key: the signature
// over header.claims, and returns the claims.
func verifyHS256(t *testing.T, key []byte, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	require.NoError(t, err)
	require.True(t, hmac.Equal(sig, mac.Sum(nil)), "signature does not verify with the key")
	var header, claims map[string]any
	h, _ := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, json.Unmarshal(h, &header))
	assert.Equal(t, "HS256", header["alg"])
	c, _ := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, json.Unmarshal(c, &claims))
	return claims
}

func writeKey(t *testing.T, path string, key []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, key, 0o600))
	require.NoError(t, os.Rename(tmp, path)) // a new inode, as a Secret update makes
}

func TestKeyTokenMintsAndRenews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwt_hs256.key")
	key := []byte("0123456789abcdef0123456789abcdef\n") // byte for byte, newline too
	writeKey(t, path, key)
	k, err := NewKeyToken(path, "slurm", time.Hour)
	require.NoError(t, err)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	k.now = func() time.Time { return now }

	first, err := k.Token()
	require.NoError(t, err)
	claims := verifyHS256(t, key, first)
	assert.Equal(t, "slurm", claims["sun"])
	assert.EqualValues(t, now.Unix(), claims["iat"])
	assert.EqualValues(t, now.Add(time.Hour).Unix(), claims["exp"])
	user, err := TokenUser(first)
	require.NoError(t, err)
	assert.Equal(t, "slurm", user)
	exp, ok := TokenExpiry(first)
	assert.True(t, ok)
	assert.Equal(t, now.Add(time.Hour).Unix(), exp.Unix())

	now = now.Add(30 * time.Minute) // more than a third left: the same token
	same, err := k.Token()
	require.NoError(t, err)
	assert.Equal(t, first, same)

	now = now.Add(11 * time.Minute) // 19 minutes left: a new one
	renewed, err := k.Token()
	require.NoError(t, err)
	assert.NotEqual(t, first, renewed)
	assert.EqualValues(t, now.Add(time.Hour).Unix(), verifyHS256(t, key, renewed)["exp"])

	// A rotated key signs the next token at once.
	key2 := []byte("another key of the cluster, rotated")
	writeKey(t, path, key2)
	rotated, err := k.Token()
	require.NoError(t, err)
	verifyHS256(t, key2, rotated)

	// No key, an empty key: no token, and the error names the file only.
	writeKey(t, path, nil)
	_, err = k.Token()
	assert.ErrorIs(t, err, ErrNoToken)
	require.NoError(t, os.Remove(path))
	_, err = k.Token()
	assert.ErrorIs(t, err, ErrNoToken)
	assert.NotContains(t, err.Error(), "another key")
}

func TestKeyTokenConfig(t *testing.T) {
	for _, tc := range []struct {
		name, file, user string
		life             time.Duration
	}{
		{"no key file", "", "slurm", time.Hour},
		{"no user", "/k", "", time.Hour},
		{"too short", "/k", "slurm", time.Minute},
		{"too long", "/k", "slurm", 90 * 24 * time.Hour},
	} {
		_, err := NewKeyToken(tc.file, tc.user, tc.life)
		assert.Error(t, err, tc.name)
	}
	_, err := New(Config{URL: "http://x:6820", TokenFile: "/t", JWTKeyFile: "/k", TokenUser: "slurm"})
	assert.ErrorContains(t, err, "want one")
	_, err = New(Config{URL: "http://x:6820"})
	assert.ErrorContains(t, err, "no token file or JWT key")
	_, err = New(Config{URL: "https://x:6820", TokenFile: "/t", CAFile: filepath.Join(t.TempDir(), "none.pem")})
	assert.ErrorContains(t, err, "CA bundle")
	bad := filepath.Join(t.TempDir(), "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not a certificate"), 0o600))
	_, err = New(Config{URL: "https://x:6820", TokenFile: "/t", CAFile: bad})
	assert.ErrorContains(t, err, "no PEM certificate")
}

// A token that expires within a day, and one slurmrestd refuses, are told
// (each kind once an hour) and shown as metrics; never the token itself.
func TestTokenProblems(t *testing.T) {
	rp := &replay{t: t, version: "v0.0.42", routes: map[string]string{
		"GET /nodes/": "nodes.200.json",
		"GET /jobs/":  "token_missing.401.json",
	}}
	hs := httptest.NewServer(rp)
	t.Cleanup(hs.Close)
	srv := hs.URL
	claims, _ := json.Marshal(map[string]any{"sun": "slurm", "exp": time.Now().Add(3 * time.Hour).Unix()})
	tok := "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(claims) + ".c2lnbmF0dXJl"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(tok), 0o600))
	var told []TokenProblem
	reg := prometheus.NewRegistry()
	c, err := New(Config{URL: srv, TokenFile: tokenFile, APIVersion: "v0.0.42", Registerer: reg, Timeout: 5 * time.Second,
		OnTokenProblem: func(p TokenProblem) { told = append(told, p) }})
	require.NoError(t, err)
	rp.token = tok
	ctx := context.Background()

	for range 3 {
		_, err = c.ListNodes(ctx, time.Time{})
		require.NoError(t, err)
	}
	require.Len(t, told, 1, "an expiring token is told once an hour")
	assert.Equal(t, TokenExpiring, told[0].Kind)
	assert.Contains(t, told[0].Message, "expires")
	assert.Contains(t, told[0].Message, "token file "+tokenFile)

	_, err = c.ListJobs(ctx, time.Time{})
	require.True(t, errors.Is(err, ErrUnauthenticated))
	_, _ = c.ListJobs(ctx, time.Time{})
	require.Len(t, told, 2)
	assert.Equal(t, TokenRefused, told[1].Kind)
	assert.Contains(t, told[1].Message, "HTTP 401")
	for _, p := range told {
		assert.NotContains(t, p.Message, "c2lnbmF0dXJl")
	}
	assert.InDelta(t, float64(time.Now().Add(3*time.Hour).Unix()), testutil.ToFloat64(c.metrics.tokenExpiry), 5)
	assert.Equal(t, 2.0, testutil.ToFloat64(c.metrics.tokenRefused))
}
