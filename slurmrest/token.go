package slurmrest

import (
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
