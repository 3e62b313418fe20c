package scheduler

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"
)

// releaseHandler answers placeholder scripts: GET /v1/placeholders/{job}
// is 200 when the job's pods are gone (the script may end and free the
// allocation), 409 while a pod still exists, 404 for a job onepool does not
// know (the script keeps waiting; Slurm's KillWait bounds it), 503 from a
// replica that does not hold the scheduler's lease. It reveals
// nothing but that answer.
func (c *Core) releaseHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/placeholders/{job}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("job"), 10, 32)
		if err != nil {
			http.Error(w, "not a job id", http.StatusBadRequest)
			return
		}
		if !c.leader.IsLeader() {
			// Only the lease holder knows; the script asks again.
			http.Error(w, "standby scheduler replica", http.StatusServiceUnavailable)
			return
		}
		c.mu.Lock()
		key, ok := c.byJob[uint32(id)]
		var p *placement
		if ok {
			p = c.places[key]
		}
		present := 0
		if p != nil {
			present = len(c.membersLocked(p.owner))
		}
		c.mu.Unlock()
		if p == nil {
			if c.wasReleased(uint32(id)) {
				_, _ = w.Write([]byte("gone\n"))
				return
			}
			http.Error(w, "unknown job", http.StatusNotFound)
			return
		}
		if present == 0 {
			gone, err := c.confirmGone(r.Context(), p.owner)
			if err != nil {
				http.Error(w, "cannot tell", http.StatusServiceUnavailable)
				return
			}
			if gone {
				_, _ = w.Write([]byte("gone\n"))
				return
			}
		}
		http.Error(w, "pod present", http.StatusConflict)
	})
	return mux
}

// serveRelease serves the release endpoint on l until ctx ends.
func (c *Core) serveRelease(ctx context.Context, l net.Listener) {
	srv := &http.Server{
		Handler:           c.releaseHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		MaxHeaderBytes:    8 << 10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		c.log.Error(err, "The placeholder release endpoint stopped")
	}
}

// releasedFor: how long a dropped placement's job is still answered "gone"
// (a script may ask during the whole of KillWait or GraceTime).
const releasedFor = 15 * time.Minute

func (c *Core) wasReleased(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.released[id]
	return ok && time.Since(at) < releasedFor
}

// pruneReleased forgets old release answers.
func (c *Core) pruneReleased() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, at := range c.released {
		if time.Since(at) > releasedFor {
			delete(c.released, id)
		}
	}
}
