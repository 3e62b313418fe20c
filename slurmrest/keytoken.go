package slurmrest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// Bounds of a minted token's lifetime: long enough that renewing costs
// nothing, short enough that a token that leaks is soon worthless.
const (
	MinTokenLifetime     = 5 * time.Minute
	MaxTokenLifetime     = 24 * time.Hour
	DefaultTokenLifetime = time.Hour
)

// KeyToken mints Slurm JWTs from the cluster's HS256 key — the
// jwt_hs256.key slurmctld and slurmrestd check tokens with
// (AuthAltParameters=jwt_key=...) — as `scontrol token` does: claims sun
// (the user), iat and exp. Each lives Lifetime; a new one is minted when a
// third of it is left, or at once when the key file changes. No
// long-lived token sits in a Secret, and none expires unnoticed.
type KeyToken struct {
	user     string
	lifetime time.Duration
	now      func() time.Time

	mu    sync.Mutex
	file  watchedFile
	token string
	exp   time.Time
}

// NewKeyToken returns a source of tokens for user, signed with the key in
// keyFile (read when first needed, again when it changes).
func NewKeyToken(keyFile, user string, lifetime time.Duration) (*KeyToken, error) {
	if keyFile == "" || user == "" {
		return nil, errors.New("slurmrest: a minted token needs the JWT key file and the Slurm user")
	}
	if lifetime < MinTokenLifetime || lifetime > MaxTokenLifetime {
		return nil, fmt.Errorf("slurmrest: token lifetime %s: want %s to %s", lifetime, MinTokenLifetime, MaxTokenLifetime)
	}
	return &KeyToken{user: user, lifetime: lifetime, now: time.Now, file: watchedFile{path: keyFile}}, nil
}

// Token returns a token valid for at least a third of the lifetime.
func (k *KeyToken) Token() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, changed, err := k.file.read()
	if err != nil {
		return "", fmt.Errorf("%w: the JWT key %s: %w", model.ErrNoToken, k.file.path, err)
	}
	if len(key) == 0 {
		k.file.data = nil
		return "", fmt.Errorf("%w: the JWT key %s is empty", model.ErrNoToken, k.file.path)
	}
	now := k.now()
	if !changed && k.token != "" && k.exp.Sub(now) > k.lifetime/3 {
		return k.token, nil
	}
	k.token, k.exp = mintJWT(key, k.user, now, k.lifetime), now.Add(k.lifetime).Truncate(time.Second)
	return k.token, nil
}

// mintJWT makes an HS256 JWT for user, valid from now for lifetime. The
// key is used as the file holds it, byte for byte, as Slurm does.
func mintJWT(key []byte, user string, now time.Time, lifetime time.Duration) string {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(struct { // strings and numbers: cannot fail
		Iat int64  `json:"iat"`
		Exp int64  `json:"exp"`
		Sun string `json:"sun"`
	}{Iat: now.Unix(), Exp: now.Add(lifetime).Unix(), Sun: user})
	signing := header + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}
