package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaitForRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		comment string
		answers []int // the release endpoint's answers, in turn; the last repeats
		want    ReleaseOutcome
		asked   int32
	}{
		{"not a onepool job: no question", "training run 7", []int{http.StatusConflict}, ReleaseNotOnepool, 0},
		{"pod already gone", "onepool:pod=ns/p;uid=u", []int{http.StatusOK}, ReleaseGone, 1},
		{"pod present, then gone", "onepool:pod=ns/p;uid=u", []int{409, 409, 200}, ReleaseGone, 3},
		{"scheduler syncing or standby, then gone", "onepool:group=ns/g", []int{503, 503, 200}, ReleaseGone, 3},
		{"onepool does not know the job", "onepool:pod=ns/p;uid=u", []int{404}, ReleaseUnknown, 1},
		{"pod never goes: bounded", "onepool:pod=ns/p;uid=u", []int{409}, ReleaseTimedOut, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, "/v1/placeholders/42", r.URL.Path)
				i := int(n.Add(1)) - 1
				w.WriteHeader(tc.answers[min(i, len(tc.answers)-1)])
			}))
			defer srv.Close()
			out, err := WaitForRelease(context.Background(), ReleaseConfig{JobID: "42", Comment: tc.comment, URL: srv.URL,
				Timeout: 300 * time.Millisecond, Every: 10 * time.Millisecond})
			require.NoError(t, err)
			assert.Equal(t, tc.want, out)
			if tc.asked >= 0 {
				assert.Equal(t, tc.asked, n.Load())
			} else {
				assert.Greater(t, n.Load(), int32(3), "asked again until the timeout")
			}
		})
	}
}

// No scheduler answers (down, unreachable): a onepool job's node is held
// until the timeout, never released on a guess.
func TestWaitForReleaseWithoutScheduler(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	start := time.Now()
	out, err := WaitForRelease(context.Background(), ReleaseConfig{JobID: "42", Comment: "onepool:pod=ns/p;uid=u", URL: url,
		Timeout: 200 * time.Millisecond, Every: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, ReleaseTimedOut, out)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
}

func TestWaitForReleaseBadInput(t *testing.T) {
	for _, c := range []ReleaseConfig{
		{JobID: "", Comment: "onepool:pod=ns/p;uid=u", URL: "http://x:1"},
		{JobID: "12a", Comment: "onepool:pod=ns/p;uid=u", URL: "http://x:1"},
		{JobID: "12", Comment: "onepool:pod=ns/p;uid=u", URL: "ftp://x"},
	} {
		c.Timeout, c.Every = time.Second, time.Millisecond
		_, err := WaitForRelease(context.Background(), c)
		assert.Error(t, err, "%+v", c)
	}
}

// Two replicas behind one address (a Service): the standby answers 503,
// the leader 200. Each question is a new connection, so the wait reaches
// the leader instead of staying with the standby on a kept-alive one.
func TestWaitForReleaseReachesTheLeaderBehindAService(t *testing.T) {
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer standby.Close()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer leader.Close()
	// The Service: a TCP balancer that sends each new connection to the
	// next replica, as kube-proxy does.
	lb := newRoundRobin(t, standby.Listener.Addr().String(), leader.Listener.Addr().String())
	out, err := WaitForRelease(context.Background(), ReleaseConfig{JobID: "42", Comment: "onepool:pod=ns/p;uid=u",
		URL: "http://" + lb, Timeout: 2 * time.Second, Every: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, ReleaseGone, out)
}

func newRoundRobin(t *testing.T, backends ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var next atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			to := backends[int(next.Add(1)-1)%len(backends)]
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c) }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	return l.Addr().String()
}
