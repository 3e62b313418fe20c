package slurmrest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The same calls as the v0.0.42 replays, on answers recorded from Slurm
// 26.05.5's v0.0.44: one decoder reads both, and 26.05's new answers
// (HTTP 422, error 2180 for a resume of a node that is not drained) mean
// what 24.11's did.
func TestReplayV0044(t *testing.T) {
	ctx := context.Background()
	c, rp := newReplayVersion(t, "v0.0.44", map[string]string{
		"GET /nodes/":                        "nodes.200.json",
		"GET /node/gpu-0":                    "node_gpu-0.200.json",
		"GET /node/nope":                     "node_unknown.200.json",
		"POST /node/nope":                    "drain_unknown.422.json",
		"POST /node/gpu-0":                   "resume_not_drained.422.json",
		"GET /partitions/":                   "partitions.200.json",
		"POST /job/submit":                   "submit.200.json",
		"GET /job/1":                         "job_1.200.json",
		"GET /jobs/":                         "jobs.200.json",
		"GET /jobs/?update_time=1795576172":  "jobs_unchanged.200.json",
		"GET /jobs/state/?job_id=1":          "jobs_state.200.json",
		"GET /job/999999":                    "job_unknown.404.json",
		"POST /job/allocate":                 "allocate.200.json",
		"DELETE /job/1":                      "cancel.200.json",
		"DELETE /job/999999":                 "cancel_unknown.200.json",
		"GET /nodes/?update_time=1795576168": "nodes_unchanged.200.json",
	})
	v, err := c.APIVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v0.0.44", v)

	list, err := c.ListNodes(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, list.Nodes, 4)
	assert.Equal(t, int64(1795576168), list.LastUpdate.Unix())
	for _, n := range list.Nodes {
		assert.Equal(t, "gpu:h100:8", n.Gres, n.Name)
		assert.Equal(t, NodeIdle, n.State.Base(), n.Name)
	}
	n, err := c.GetNode(ctx, "gpu-0")
	require.NoError(t, err)
	assert.Equal(t, 64, n.CPUs)
	_, err = c.GetNode(ctx, "nope")
	assert.ErrorIs(t, err, ErrNotFound)
	err = c.Drain(ctx, "nope", "maintenance")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.ErrorIs(t, err, ErrNotFound, "26.05: HTTP 422 with error 2018")
	assert.Equal(t, 422, ae.StatusCode)
	assert.NoError(t, c.Resume(ctx, "gpu-0"), "26.05: HTTP 422 with error 2180, and the node reads back IDLE")

	parts, err := c.ListPartitions(ctx)
	require.NoError(t, err)
	require.Len(t, parts, 2)
	assert.Equal(t, "gpu-[0-3]", parts[0].Nodes)

	id, err := c.SubmitJob(ctx, JobSubmit{Name: "rec", Script: "#!/bin/sh\nsleep 300\n", Partition: "main", Nodes: "1", Tasks: 1, TresPerNode: "gres/gpu:2", Comment: "onepool:pod=rec/rec"})
	require.NoError(t, err)
	assert.Equal(t, uint32(1), id)
	rp.mu.Lock()
	body := rp.bodies[len(rp.bodies)-1]
	rp.mu.Unlock()
	assert.Contains(t, body, `"tres_per_node":"gres/gpu:2"`)
	j, err := c.GetJob(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, JobRunning, j.State.Base())
	assert.Equal(t, map[string]string{"gpu-0": "gpu:h100:2(IDX:0-1)"}, j.GresDetail)
	idx, err := j.GPUIndexes("gpu-0")
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, idx)
	all, err := c.ListJobs(ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, all.Jobs, 1)
	none, err := c.ListJobs(ctx, all.LastUpdate)
	require.NoError(t, err)
	assert.Nil(t, none, "an unchanged job table")
	states, err := c.JobStates(ctx, []uint32{1})
	require.NoError(t, err)
	assert.Equal(t, []JobStateEntry{{ID: 1, State: JobState{"RUNNING"}}}, states)
	_, err = c.GetJob(ctx, 999999)
	assert.ErrorIs(t, err, ErrNotFound)
	alloc, err := c.AllocateNow(ctx, JobSubmit{Name: "alloc", Partition: "main", Nodes: "1", Tasks: 1, TresPerNode: "gres/gpu:8"})
	require.NoError(t, err)
	assert.Equal(t, uint32(2), alloc)
	require.NoError(t, c.CancelJob(ctx, 1))
	assert.ErrorIs(t, c.CancelJob(ctx, 999999), ErrNotFound)
	_, err = c.ListNodes(ctx, list.LastUpdate)
	require.NoError(t, err)
}

// A refused immediate allocation: 26.05 answers HTTP 422 with error 2016,
// which the scheduler reads as "nodes busy, queue instead".
func TestReplayV0044AllocationRefused(t *testing.T) {
	c, _ := newReplayVersion(t, "v0.0.44", map[string]string{"POST /job/allocate": "allocate_busy.422.json"})
	_, err := c.AllocateNow(context.Background(), JobSubmit{Name: "alloc2", Partition: "main", Nodes: "4", Tasks: 4, TresPerNode: "gres/gpu:8"})
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.True(t, ae.HasErrno(ErrnoNodesBusy), "%v", err)
	assert.ErrorIs(t, err, ErrSlurm)
}

// versionServer is slurmrestd as far as negotiation sees it: the versions
// it serves answer ping, others the 404 26.05.5 sent for an unknown
// version, and /openapi/v3 lists the paths of the versions it has (a
// slice of 26.05.5's document, or of another listing).
type versionServer struct {
	served  []string
	openapi string // file in internal/rest/testdata/v0.0.44
	status  int    // answer to every ping when set (401, 502)
	body    string // with status: its body
	pings   atomic.Int32
}

func (s *versionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	notFound, err := os.ReadFile(filepath.Join(recorded("v0.0.44"), "ping_unknown_version.404.json"))
	if err != nil {
		panic(err)
	}
	if r.URL.Path == "/openapi/v3" {
		doc, err := os.ReadFile(filepath.Join(recorded("v0.0.44"), s.openapi))
		if err != nil {
			panic(err)
		}
		_, _ = w.Write(doc)
		return
	}
	s.pings.Add(1)
	if s.status != 0 {
		w.WriteHeader(s.status)
		_, _ = w.Write([]byte(s.body))
		return
	}
	for _, v := range s.served {
		if r.URL.Path == "/slurm/"+v+"/ping/" {
			// 26.05.5's answer, naming the data parser of the version asked.
			ping, err := os.ReadFile(filepath.Join(recorded(v), "..", "v0.0.44", "jobs_unchanged.200.json"))
			if err != nil {
				panic(err)
			}
			_, _ = w.Write(bytes.ReplaceAll(ping, []byte("data_parser/v0.0.44"), []byte("data_parser/"+v)))
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(notFound)
}

func versionClient(t *testing.T, s *versionServer, force string) *Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	c, err := New(Config{URL: srv.URL, TokenFile: tokenFile, Timeout: 5 * time.Second, APIVersion: force})
	require.NoError(t, err)
	return c
}

func TestNegotiateNewestCommonVersion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		served []string
		want   string
	}{
		{"Slurm 24.11 (v0.0.40 to v0.0.42)", []string{"v0.0.40", "v0.0.41", "v0.0.42"}, "v0.0.42"},
		{"Slurm 26.05 (v0.0.42 to v0.0.45)", []string{"v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"}, "v0.0.44"},
		{"Slurm 26.11 (no v0.0.42)", []string{"v0.0.44", "v0.0.45", "v0.0.46"}, "v0.0.44"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &versionServer{served: tc.served}
			c := versionClient(t, s, "")
			got, err := c.APIVersion(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			asked := s.pings.Load()
			_, err = c.APIVersion(context.Background())
			require.NoError(t, err)
			assert.Equal(t, asked, s.pings.Load(), "asked once, then kept")
		})
	}
}

// slurmrestd with no version onepool speaks: the error names what it
// offers and what onepool speaks, and no call reaches Slurm.
func TestNegotiateNoCommonVersion(t *testing.T) {
	s := &versionServer{served: []string{"v0.0.40", "v0.0.41"}, openapi: "openapi_paths_old.200.json"}
	c := versionClient(t, s, "")
	_, err := c.APIVersion(context.Background())
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	assert.Contains(t, err.Error(), "slurmrestd offers v0.0.40, v0.0.41")
	assert.Contains(t, err.Error(), "onepool speaks v0.0.44, v0.0.42")
	_, err = c.SubmitJob(context.Background(), JobSubmit{Name: "x", Script: "#!/bin/sh\n"})
	require.ErrorIs(t, err, ErrUnsupportedVersion, "nothing is submitted in an unknown version")
	noToken(t, err)
}

// Negotiation needs an answer: a refused token or a dead slurmrestd is
// that error (asked again on the next call), never a version guessed.
func TestNegotiateFailuresAreTyped(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   error
	}{{http.StatusUnauthorized, ErrUnauthenticated}, {511, ErrUnauthenticated}, {http.StatusBadGateway, ErrUnreachable}} {
		s := &versionServer{status: tc.status}
		c := versionClient(t, s, "")
		_, err := c.ListNodes(context.Background(), time.Time{})
		assert.ErrorIs(t, err, tc.want, "HTTP %d", tc.status)
		s.status = 0
		s.served = []string{"v0.0.42"}
		v, err := c.APIVersion(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "v0.0.42", v, "asked again once slurmrestd answers")
	}
}

// An answer that is not slurmrestd's own says nothing of the versions it
// serves. The soak found it: a proxy answering HTTP 200 with only an errors
// array made the controller manager speak v0.0.44 to 24.11's slurmrestd,
// and every call after was a 404, its Slurm cache stale for good.
func TestNegotiateNeedsSlurmrestdsOwnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"200 with only an errors array", http.StatusOK, `{"errors":[{"error_number":9999,"description":"injected"}],"meta":{}}`},
		{"a proxy's HTML page", http.StatusOK, "<html><body>maintenance</body></html>"},
		{"another version's answer", http.StatusOK, `{"meta":{"plugin":{"data_parser":"data_parser/v0.0.41"}},"errors":[]}`},
		{"500 from a proxy", http.StatusInternalServerError, "upstream error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &versionServer{status: tc.status, body: tc.body}
			c := versionClient(t, s, "")
			_, err := c.ListNodes(context.Background(), time.Time{})
			require.ErrorIs(t, err, ErrBadResponse)
			s.status = 0
			s.served = []string{"v0.0.40", "v0.0.41", "v0.0.42"}
			v, err := c.APIVersion(context.Background())
			require.NoError(t, err)
			assert.Equal(t, "v0.0.42", v, "asked again once slurmrestd itself answers")
		})
	}
}

// slurmrestd upgraded under onepool no longer serves the version it spoke:
// its 404 for an unknown path (not a version's "no such job") makes the
// next call negotiate again.
func TestNegotiateAgainWhenTheVersionIsGone(t *testing.T) {
	s := &versionServer{served: []string{"v0.0.40", "v0.0.41", "v0.0.42"}}
	c := versionClient(t, s, "")
	v, err := c.APIVersion(context.Background())
	require.NoError(t, err)
	require.Equal(t, "v0.0.42", v)
	s.served = []string{"v0.0.44", "v0.0.45"}
	_, err = c.ListNodes(context.Background(), time.Time{})
	require.Error(t, err)
	v, err = c.APIVersion(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "v0.0.44", v)
}

// A forced version is spoken without asking; an unknown one is refused at New.
func TestForcedVersion(t *testing.T) {
	s := &versionServer{served: []string{"v0.0.42", "v0.0.44"}}
	c := versionClient(t, s, "v0.0.42")
	v, err := c.APIVersion(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "v0.0.42", v)
	assert.Zero(t, s.pings.Load())
	_, err = New(Config{URL: "http://127.0.0.1:1", TokenFile: "/nonexistent", APIVersion: "v0.0.39"})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "onepool speaks v0.0.44, v0.0.42"), err.Error())
	assert.False(t, errors.Is(err, ErrUnsupportedVersion))
}

// Slurm 26.05 gives a node listing's last_update as the time of the answer,
// not of the last change: a cache asks its next delta from one second
// before it (the same-second rule of nextSince), and that delta must go to
// slurmrestd, which answers 304 when nothing changed. (Before, the client
// took any delta from before a listing's last_update as "changed" and
// listed all nodes: on 26.05 every poll, 1.5 MB a second at 1,000 nodes.)
func TestReplayV0044NodeDeltaFromBeforeTheListing(t *testing.T) {
	ctx := context.Background()
	c, rp := newReplayVersion(t, "v0.0.44", map[string]string{
		"GET /nodes/":                        "nodes.200.json",
		"GET /nodes/?update_time=1795576167": "nodes_unchanged.304.json", // 304: no body
	})
	list, err := c.ListNodes(ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, int64(1795576168), list.LastUpdate.Unix())
	again, err := c.ListNodes(ctx, list.LastUpdate.Add(-time.Second))
	require.NoError(t, err)
	assert.Nil(t, again, "304: nothing changed")
	assert.Equal(t, []string{"GET /nodes/", "GET /nodes/?update_time=1795576167"}, rp.requests())
}
