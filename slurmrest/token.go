package slurmrest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// FileToken reads a JWT from a file and reads it again whenever the file
// changes (size, mtime or inode), so a rotated token is used without restart.
// The token never appears in its errors.
type FileToken struct {
	path string

	mu    sync.Mutex
	token string
	size  int64
	mtime time.Time
	ino   uint64
}

// NewFileToken returns a token source for path; it does not read it yet.
func NewFileToken(path string) *FileToken { return &FileToken{path: path} }

// Token returns the current token.
func (f *FileToken) Token() (string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", model.ErrNoToken, f.path, err)
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && st.Size() == f.size && st.ModTime().Equal(f.mtime) && ino == f.ino {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", model.ErrNoToken, f.path, err)
	}
	tok := strings.TrimSpace(string(b))
	// `scontrol token` prints SLURM_JWT=...; accept its output as is.
	tok = strings.TrimPrefix(tok, "SLURM_JWT=")
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%w: %s holds no single token", model.ErrNoToken, f.path)
	}
	f.token, f.size, f.mtime, f.ino = tok, st.Size(), st.ModTime(), ino
	return tok, nil
}

// TokenUser reads the user a Slurm JWT was made for: its "sun" claim
// (Slurm's; "username" in tokens other tools make). Only the claims are
// decoded: the signature is Slurm's to check. Errors never show the token.
func TokenUser(token string) (string, error) {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return "", errors.New("the Slurm token is not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", errors.New("the Slurm token's claims are not base64url")
	}
	var claims struct {
		Sun      string `json:"sun"`
		Username string `json:"username"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return "", errors.New("the Slurm token's claims are not JSON")
	}
	if claims.Sun != "" {
		return claims.Sun, nil
	}
	if claims.Username != "" {
		return claims.Username, nil
	}
	return "", errors.New("the Slurm token names no user (no sun claim)")
}
