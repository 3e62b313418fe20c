package slurmcluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MintToken returns a new JWT for user that lives for lifespan (scontrol
// token). Its errors never carry the command's output: it may hold a token.
func (c *Cluster) MintToken(ctx context.Context, user string, lifespan time.Duration) (string, error) {
	secs := int(lifespan / time.Second)
	if secs < 1 {
		secs = 1
	}
	out, err := c.Run(ctx, "scontrol", "token", "username="+user, "lifespan="+strconv.Itoa(secs))
	if err != nil {
		return "", errors.New("scontrol token failed") // the output may hold a token; never echo it
	}
	tok, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "SLURM_JWT=")
	if !ok || tok == "" {
		return "", errors.New("scontrol token printed no SLURM_JWT=")
	}
	return tok, nil
}

// TokenFile is an admin token kept in a file for onepool (slurmrestd's
// X-SLURM-USER-TOKEN), renewed by Cluster.EnsureToken.
type TokenFile struct {
	// Path is the token's file; Path+".release" says which release minted it.
	Path string
	// User is the token's Slurm user, Release the release the cluster runs.
	User, Release string
	// Lifetime is a new token's life; EnsureToken renews one older than
	// Lifetime-RenewBefore.
	Lifetime, RenewBefore time.Duration
}

// EnsureToken keeps a working token in t.Path: renewed when it is older than its
// renewal age or than the cluster's JWT key (a rebuilt rootfs has a new key,
// which the old token does not match), minted by another release, or
// refused by slurmrestd.
func (c *Cluster) EnsureToken(ctx context.Context, t TokenFile) error {
	st, err := os.Stat(t.Path)
	key, kerr := os.Stat(filepath.Join(c.Root, "etc/slurm/jwt_hs256.key"))
	// Each release's rootfs has its own JWT key: a token minted by the
	// other one is refused (HTTP 511) whatever its age.
	minted, _ := os.ReadFile(t.Path + ".release")
	if err == nil && kerr == nil && time.Since(st.ModTime()) < t.Lifetime-t.RenewBefore && st.ModTime().After(key.ModTime()) &&
		strings.TrimSpace(string(minted)) == t.Release && !c.tokenRefused(ctx, t.Path) {
		return nil
	}
	tok, err := c.MintToken(ctx, t.User, t.Lifetime)
	if err != nil {
		return err
	}
	tmp := t.Path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, t.Path); err != nil {
		return err
	}
	return os.WriteFile(t.Path+".release", []byte(t.Release+"\n"), 0o644)
}

// tokenRefused says whether slurmrestd refuses the token in path (HTTP 401
// or 511): a test that spoiled it (the fault soak) may have died before it
// put a good one back. Anything else (slurmrestd not up yet) is no refusal.
func (c *Cluster) tokenRefused(ctx context.Context, path string) bool {
	tok, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RESTURL()+"/slurm/"+c.API+"/jobs/state/", nil)
	if err != nil {
		return false
	}
	req.Header.Set("X-SLURM-USER-TOKEN", strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == 511
}
