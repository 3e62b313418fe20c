package slurmrest

import (
	"fmt"
	"sync"
	"time"
)

// TokenProblemKind says what is wrong with the client's Slurm token.
type TokenProblemKind int

const (
	// TokenExpiring: the token expires within TokenWarnBefore.
	TokenExpiring TokenProblemKind = iota + 1
	// TokenRefused: slurmrestd refused the token (HTTP 401, or 511 for an
	// expired or garbled one).
	TokenRefused
)

// TokenProblem is what OnTokenProblem hears. Its message never holds the
// token.
type TokenProblem struct {
	Kind    TokenProblemKind
	Message string
	Expires time.Time // zero when the token says none
}

// TokenWarnBefore says when a token is a problem: a token that expires sooner than this is a problem
// (renewed by hand, someone must act within the day).
const TokenWarnBefore = 24 * time.Hour

// tokenProblemEvery bounds how often one kind of problem is told again.
const tokenProblemEvery = time.Hour

// tokenWatch follows the token requests carry: its expiry as a metric, and
// the problems OnTokenProblem hears (each kind at most once an hour).
type tokenWatch struct {
	metrics *metrics
	notify  func(TokenProblem)
	now     func() time.Time

	mu     sync.Mutex
	last   string // the token last seen (its expiry is read once)
	exp    time.Time
	told   map[TokenProblemKind]time.Time
	source string // where a new token comes from, for messages
	// renews: the source makes a new token before the old expires (a
	// KeyToken); its tokens' near expiry is no problem.
	renews bool
}

func newTokenWatch(m *metrics, notify func(TokenProblem), source string, renews bool) *tokenWatch {
	return &tokenWatch{metrics: m, notify: notify, now: time.Now, told: map[TokenProblemKind]time.Time{}, source: source, renews: renews}
}

// seen is called with each token a request carries.
func (w *tokenWatch) seen(tok string) {
	w.mu.Lock()
	if tok != w.last {
		w.last = tok
		w.exp, _ = TokenExpiry(tok)
		if w.exp.IsZero() {
			w.metrics.tokenExpiry.Set(0)
		} else {
			w.metrics.tokenExpiry.Set(float64(w.exp.Unix()))
		}
	}
	exp, now := w.exp, w.now()
	w.mu.Unlock()
	if !w.renews && !exp.IsZero() && exp.Sub(now) < TokenWarnBefore {
		msg := fmt.Sprintf("the slurmrestd token expires %s (in %s); renew it (a new token in the %s), or let onepool mint its own from the JWT key",
			exp.UTC().Format(time.RFC3339), exp.Sub(now).Round(time.Minute), w.source)
		if exp.Before(now) {
			msg = fmt.Sprintf("the slurmrestd token expired %s; every Slurm request fails until it is renewed (a new token in the %s)", exp.UTC().Format(time.RFC3339), w.source)
		}
		w.tell(TokenProblem{Kind: TokenExpiring, Message: msg, Expires: exp})
	}
}

// refused is called when slurmrestd answers a request with 401 or 511.
func (w *tokenWatch) refused(code int) {
	w.metrics.tokenRefused.Inc()
	w.mu.Lock()
	exp := w.exp
	w.mu.Unlock()
	w.tell(TokenProblem{Kind: TokenRefused, Expires: exp,
		Message: fmt.Sprintf("slurmrestd refused onepool's token (HTTP %d): expired, signed with another key, or for a user Slurm does not know", code)})
}

func (w *tokenWatch) tell(p TokenProblem) {
	if w.notify == nil {
		return
	}
	w.mu.Lock()
	now := w.now()
	if at, ok := w.told[p.Kind]; ok && now.Sub(at) < tokenProblemEvery {
		w.mu.Unlock()
		return
	}
	w.told[p.Kind] = now
	w.mu.Unlock()
	w.notify(p)
}
