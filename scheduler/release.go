package scheduler

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
)

// releaser serves the placeholder scripts' release endpoint from the
// store's records; only the lease holder answers.
type releaser struct {
	st      releaseRecords
	kube    kubernetes.Interface
	leader  Leadership
	answers *prometheus.CounterVec // onepool_scheduler_release_answers_total{answer}
	log     klog.Logger
}

// handler answers placeholder scripts: GET /v1/placeholders/{job}
// is 200 when the job's pods are gone (the script may end and free the
// allocation), 409 while a pod still exists, 404 for a job onepool does not
// know (the script keeps waiting; Slurm's KillWait bounds it), 503 from a
// replica that does not hold the scheduler's lease. It reveals
// nothing but that answer.
func (r *releaser) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+keys.ReleasePath+"{job}", func(w http.ResponseWriter, req *http.Request) {
		id, err := strconv.ParseUint(req.PathValue("job"), 10, 32)
		if err != nil || id == 0 {
			http.Error(w, "not a job id", http.StatusBadRequest)
			return
		}
		a := r.answer(req.Context(), uint32(id))
		r.answers.WithLabelValues(a.label).Inc()
		if a.code != http.StatusOK {
			http.Error(w, a.text, a.code)
			return
		}
		_, _ = w.Write([]byte(a.text + "\n"))
	})
	return mux
}

// releaseReply is one answer to a placeholder script.
type releaseReply struct {
	code  int
	text  string
	label string // onepool_scheduler_release_answers_total{answer}
}

// answer says whether job id's pods are gone.
func (r *releaser) answer(ctx context.Context, id uint32) releaseReply {
	if !r.leader.IsLeader() {
		// Only the lease holder knows; the script asks again.
		return releaseReply{http.StatusServiceUnavailable, "standby scheduler replica", "standby"}
	}
	gone := releaseReply{http.StatusOK, "gone", "gone"}
	known := r.st.pods(id)
	switch {
	case !known.synced:
		// Until Slurm's jobs are read, an unknown job may be one whose
		// pods live: "unknown" would let the release epilog go.
		return releaseReply{http.StatusServiceUnavailable, "reading Slurm's jobs", "syncing"}
	case known.owner == nil && known.released:
		return gone
	case known.owner == nil:
		return releaseReply{http.StatusNotFound, "unknown job", "unknown"}
	}
	if known.present == 0 {
		ok, err := podsGone(ctx, r.kube, *known.owner, known.counts)
		if err != nil {
			return releaseReply{http.StatusServiceUnavailable, "cannot tell", "error"}
		}
		if ok {
			return gone
		}
	}
	return releaseReply{http.StatusConflict, "pod present", "present"}
}

// serve serves the release endpoint on l until ctx ends.
func (r *releaser) serve(ctx context.Context, l net.Listener) {
	srv := &http.Server{
		Handler:           r.handler(),
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
		r.log.Error(err, "The placeholder release endpoint stopped")
	}
}

// releasedFor: how long a dropped placement's job is still answered "gone"
// (a script may ask during the whole of KillWait or GraceTime).
const releasedFor = 15 * time.Minute
