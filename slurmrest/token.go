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

// TokenSource gives the JWT each request carries.
type TokenSource interface {
	Token() (string, error)
}

// watchedFile reads a file again whenever it changes (size, mtime or
// inode): a Secret the kubelet updates, a file a rotation tool replaces.
type watchedFile struct {
	path  string
	data  []byte
	size  int64
	mtime time.Time
	ino   uint64
}

// read returns the file's content and whether it changed since the last
// read. The caller holds its own lock.
func (w *watchedFile) read() ([]byte, bool, error) {
	st, err := os.Stat(w.path)
	if err != nil {
		return nil, false, err
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	if w.data != nil && st.Size() == w.size && st.ModTime().Equal(w.mtime) && ino == w.ino {
		return w.data, false, nil
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		return nil, false, err
	}
	w.data, w.size, w.mtime, w.ino = b, st.Size(), st.ModTime(), ino
	return b, true, nil
}

// FileToken reads a JWT from a file and reads it again whenever the file
// changes, so a rotated token is used without restart. The token never
// appears in its errors.
type FileToken struct {
	mu    sync.Mutex
	file  watchedFile
	token string
}

// NewFileToken returns a token source for path; it does not read it yet.
func NewFileToken(path string) *FileToken { return &FileToken{file: watchedFile{path: path}} }

// Token returns the current token.
func (f *FileToken) Token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, changed, err := f.file.read()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", model.ErrNoToken, f.file.path, err)
	}
	if !changed && f.token != "" {
		return f.token, nil
	}
	f.token = ""
	tok := strings.TrimSpace(string(b))
	// `scontrol token` prints SLURM_JWT=...; accept its output as is.
	tok = strings.TrimPrefix(tok, "SLURM_JWT=")
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		f.file.data = nil // read it again next time
		return "", fmt.Errorf("%w: %s holds no single token", model.ErrNoToken, f.file.path)
	}
	f.token = tok
	return tok, nil
}

// tokenClaims are the claims of a Slurm JWT onepool reads.
type tokenClaims struct {
	Sun      string `json:"sun"`
	Username string `json:"username"`
	Exp      int64  `json:"exp"`
}

// claimsOf decodes a JWT's claims only: the signature is Slurm's to check.
// Errors never show the token.
func claimsOf(token string) (tokenClaims, error) {
	var c tokenClaims
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return c, errors.New("the Slurm token is not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return c, errors.New("the Slurm token's claims are not base64url")
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, errors.New("the Slurm token's claims are not JSON")
	}
	return c, nil
}

// TokenUser reads the user a Slurm JWT was made for: its "sun" claim
// (Slurm's; "username" in tokens other tools make).
func TokenUser(token string) (string, error) {
	c, err := claimsOf(token)
	if err != nil {
		return "", err
	}
	if c.Sun != "" {
		return c.Sun, nil
	}
	if c.Username != "" {
		return c.Username, nil
	}
	return "", errors.New("the Slurm token names no user (no sun claim)")
}

// TokenExpiry reads when a Slurm JWT expires (its "exp" claim); false when
// it says none.
func TokenExpiry(token string) (time.Time, bool) {
	c, err := claimsOf(token)
	if err != nil || c.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(c.Exp, 0), true
}
