package slurmrest

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileTokenRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	src := NewFileToken(path)
	if _, err := src.Token(); !errors.Is(err, ErrNoToken) {
		t.Fatalf("missing file: err = %v, want ErrNoToken", err)
	}
	steps := []struct {
		write, want string
		wantErr     bool
	}{
		{write: "first\n", want: "first"},
		{write: "SLURM_JWT=second", want: "second"},
		{write: "a-longer-third-token", want: "a-longer-third-token"},
		{write: "  \n", wantErr: true},
		{write: "two tokens", wantErr: true},
	}
	for _, s := range steps {
		// Replace the file as rotation tools do: a new inode every time.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s.write), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		got, err := src.Token()
		if s.wantErr {
			if !errors.Is(err, ErrNoToken) {
				t.Fatalf("token file %q: err = %v, want ErrNoToken", s.write, err)
			}
			if strings.Contains(err.Error(), "tokens") {
				t.Fatalf("error shows the file's content: %v", err)
			}
			continue
		}
		if err != nil || got != s.want {
			t.Fatalf("token file %q: got %q, %v; want %q", s.write, got, err, s.want)
		}
	}
}

func TestTokenUser(t *testing.T) {
	jwt := func(claims string) string {
		return "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	}
	for _, tc := range []struct {
		name, token, want string
		err               bool
	}{
		{"Slurm's sun", jwt(`{"exp":1,"iat":0,"sun":"slurm"}`), "slurm", false},
		{"username", jwt(`{"username":"onepool"}`), "onepool", false},
		{"no user", jwt(`{"exp":1}`), "", true},
		{"not a JWT", "opaque-secret", "", true},
		{"claims not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("secret-ish")) + ".c", "", true},
	} {
		got, err := TokenUser(tc.token)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %q, %v; want %q (err %v)", tc.name, got, err, tc.want, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
}
