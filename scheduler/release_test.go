package scheduler

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/onepool/onepool/slurmrest"
)

// What the release endpoint answers a placeholder script (or the release
// epilog) asking about job 7, the fixture pod's running job: 200 lets the
// job end and Slurm free its GPUs, so only a pod confirmed gone by the API
// server earns it.
func TestReleaseAnswer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, f *coreFixture)
		code    int
		label   string
	}{
		{name: "a standby replica", code: http.StatusServiceUnavailable, label: "standby", prepare: func(t *testing.T, f *coreFixture) {
			f.standby()
		}},
		{name: "still reading Slurm's jobs", code: http.StatusServiceUnavailable, label: "syncing", prepare: func(t *testing.T, f *coreFixture) {
			f.core.rec.s.synced = false
		}},
		{name: "the pod lives", code: http.StatusConflict, label: "present"},
		{name: "the informer lost the pod, the API server has it", code: http.StatusConflict, label: "present", prepare: func(t *testing.T, f *coreFixture) {
			f.core.podDeleted(f.pod)
		}},
		{name: "the pod is gone", code: http.StatusOK, label: "gone", prepare: func(t *testing.T, f *coreFixture) {
			require.NoError(t, f.kube.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}))
			f.core.podDeleted(f.pod)
		}},
		{name: "the API server cannot tell", code: http.StatusServiceUnavailable, label: "error", prepare: func(t *testing.T, f *coreFixture) {
			f.core.podDeleted(f.pod)
			f.kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcd is slow")
			})
		}},
		{name: "a job onepool does not know", code: http.StatusNotFound, label: "unknown", prepare: func(t *testing.T, f *coreFixture) {
			f.core.rec.s.mu.Lock()
			delete(f.core.rec.s.byJob, 7)
			f.core.rec.s.mu.Unlock()
		}},
		{name: "the job of a placement dropped moments ago", code: http.StatusOK, label: "gone", prepare: func(t *testing.T, f *coreFixture) {
			f.core.rec.s.mu.Lock()
			delete(f.core.rec.s.byJob, 7)
			f.core.rec.s.released[7] = time.Now().Add(-time.Minute)
			f.core.rec.s.mu.Unlock()
		}},
		{name: "the job of a placement dropped long ago", code: http.StatusNotFound, label: "unknown", prepare: func(t *testing.T, f *coreFixture) {
			f.core.rec.s.mu.Lock()
			delete(f.core.rec.s.byJob, 7)
			f.core.rec.s.released[7] = time.Now().Add(-releasedFor - time.Minute)
			f.core.rec.s.mu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCoreFixture(t)
			f.core.book.observe(f.job(7, slurmrest.JobRunning, "gpu-1"))
			if tc.prepare != nil {
				tc.prepare(t, f)
			}
			srv := httptest.NewServer(f.core.rel.handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/v1/placeholders/7")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, tc.code, resp.StatusCode, "answer %q", body)
			assert.Equal(t, 1.0, testutil.ToFloat64(f.core.metrics.release.WithLabelValues(tc.label)), "counted as %s", tc.label)
		})
	}
}

func TestReleaseHandlerRefusesWhatIsNotAJobID(t *testing.T) {
	f := newCoreFixture(t)
	srv := httptest.NewServer(f.core.rel.handler())
	defer srv.Close()
	for path, want := range map[string]int{
		"/v1/placeholders/abc":        http.StatusBadRequest,
		"/v1/placeholders/0":          http.StatusBadRequest,
		"/v1/placeholders/4294967296": http.StatusBadRequest, // over 32 bits
		"/v1/placeholders/":           http.StatusNotFound,
		"/v1/other/7":                 http.StatusNotFound,
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, path)
	}
	resp, err := http.Post(srv.URL+"/v1/placeholders/7", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "the endpoint only answers GET")
}

// Old release answers and deletion marks are forgotten after releasedFor;
// recent ones are kept.
func TestPruneReleased(t *testing.T) {
	f := newCoreFixture(t)
	old, recent := time.Now().Add(-releasedFor-time.Second), time.Now().Add(-time.Minute)
	f.core.rec.s.released[1], f.core.rec.s.released[2] = old, recent
	f.core.rec.s.deleted["gone-long-ago"], f.core.rec.s.deleted["gone-now"] = old, recent
	f.core.rec.prune()
	assert.Equal(t, map[uint32]time.Time{2: recent}, f.core.rec.s.released)
	assert.Len(t, f.core.rec.s.deleted, 1)
	assert.Contains(t, f.core.rec.s.deleted, types.UID("gone-now"))
	assert.False(t, f.core.rel.st.wasReleasedLocked(1))
	assert.True(t, f.core.rel.st.wasReleasedLocked(2))
}

// The release endpoint serves until its context ends, then lets go of the
// port.
func TestServeReleaseStopsWithItsContext(t *testing.T) {
	f := newCoreFixture(t)
	f.core.args.ReleaseListenAddress = "127.0.0.1:0"
	l, err := f.core.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.core.rel.serve(ctx, l) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/v1/placeholders/77")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the release endpoint did not stop")
	}
	_, err = http.Get("http://" + l.Addr().String() + "/v1/placeholders/77")
	assert.Error(t, err, "nothing listens once it stopped")

	taken := newCoreFixture(t)
	taken.core.args.ReleaseListenAddress = l.Addr().String()
	other, err := net.Listen("tcp", l.Addr().String())
	require.NoError(t, err)
	defer other.Close()
	_, err = taken.core.Listen()
	assert.ErrorContains(t, err, "onepool release endpoint", "a taken port fails start-up")
}
