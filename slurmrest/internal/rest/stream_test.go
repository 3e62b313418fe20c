package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest/model"
)

// serveList is a Backend of version whose every GET answers body with
// status; cut, when set, closes the connection after that many bytes of a
// body announced whole.
func serveList(t *testing.T, version string, status int, body []byte, cut int) *Backend {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		if cut > 0 {
			_, _ = w.Write(body[:cut])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	b, err := New(srv.URL, version, srv.Client())
	require.NoError(t, err)
	return b
}

func recorded(t *testing.T, version, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", version, name))
	require.NoError(t, err)
	return b
}

// twoJobs is a recorded listing with its job twice, the second under the
// next id: the recordings hold one job each.
func twoJobs(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	var jobs []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(m["jobs"], &jobs))
	require.NotEmpty(t, jobs)
	var id int64
	require.NoError(t, json.Unmarshal(jobs[0]["job_id"], &id))
	second := maps.Clone(jobs[0])
	second["job_id"] = json.RawMessage(strconv.FormatInt(id+1, 10))
	raw, err := json.Marshal(append(jobs, second))
	require.NoError(t, err)
	m["jobs"] = raw
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// A listing read as a stream gives what the whole answer decoded gives, and
// keep holds only the jobs it accepts while Listed counts them all.
func TestListJobsStreams(t *testing.T) {
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			body := twoJobs(t, recorded(t, v, "jobs.200.json"))
			whole, last, err := DecodeJobs(body)
			require.NoError(t, err)
			require.Len(t, whole, 2)

			all, err := serveList(t, v, 200, body, 0).ListJobs(context.Background(), time.Time{}, nil)
			require.NoError(t, err)
			assert.Equal(t, whole, all.Jobs)
			assert.Equal(t, len(whole), all.Listed)
			assert.Equal(t, last, all.LastUpdate)
			assert.False(t, last.IsZero(), "the recording's last_update")

			want := whole[1].ID
			one, err := serveList(t, v, 200, body, 0).ListJobs(context.Background(), time.Time{},
				func(j *model.Job) bool { return j.ID == want })
			require.NoError(t, err)
			require.Len(t, one.Jobs, 1)
			assert.Equal(t, whole[1], one.Jobs[0])
			assert.Equal(t, len(whole), one.Listed, "Listed counts the jobs not kept too")

			none, err := serveList(t, v, 200, body, 0).ListJobs(context.Background(), time.Time{},
				func(*model.Job) bool { return false })
			require.NoError(t, err)
			assert.Empty(t, none.Jobs)
			assert.Equal(t, len(whole), none.Listed)
		})
	}
}

// "No change" is nil for a delta; an empty first listing is an empty list.
func TestListJobsStreamUnchanged(t *testing.T) {
	for _, v := range Versions {
		body := recorded(t, v, "jobs_unchanged.200.json")
		got, err := serveList(t, v, 200, body, 0).ListJobs(context.Background(), time.Unix(1795229225, 0), nil)
		require.NoError(t, err, v)
		assert.Nil(t, got, "%s: an unchanged delta", v)
		got, err = serveList(t, v, 200, body, 0).ListJobs(context.Background(), time.Time{}, nil)
		require.NoError(t, err, v)
		require.NotNil(t, got, v)
		assert.Empty(t, got.Jobs, v)
	}
}

// What goes wrong halfway through a streamed answer is told apart as a
// caller must: a connection cut is the transport's (retry), an answer that
// is not the JSON asked for is a bad response, and Slurm's errors in a 200
// fail the listing with their errno. No jobs come back from any of them.
func TestListJobsStreamFailures(t *testing.T) {
	v := Versions[0]
	body := recorded(t, v, "jobs.200.json")
	half := bytes.LastIndex(body[:len(body)/2], []byte(`"job_id"`))
	require.Positive(t, half)
	tests := []struct {
		name   string
		status int
		body   []byte
		cut    int
		kind   error
		errno  int
	}{
		{name: "connection cut", status: 200, body: body, cut: half, kind: model.ErrUnreachable},
		{name: "truncated answer", status: 200, body: body[:half], kind: model.ErrBadResponse},
		{name: "data after the object", status: 200, body: append(bytes.Clone(body), `{"jobs":[]}`...), kind: model.ErrBadResponse},
		{name: "not an object", status: 200, body: []byte(`[{"job_id": 1}]`), kind: model.ErrBadResponse},
		{name: "jobs not an array", status: 200, body: []byte(`{"jobs": {"job_id": 1}}`), kind: model.ErrBadResponse},
		{name: "a job without an id", status: 200, body: []byte(`{"jobs": [{"job_id": 7}, {"name": "x"}]}`), kind: model.ErrBadResponse},
		{name: "a job of the wrong shape", status: 200, body: []byte(`{"jobs": [{"job_id": "seven"}]}`), kind: model.ErrBadResponse},
		{name: "bad last_update", status: 200, body: []byte(`{"jobs": [], "last_update": "soon"}`), kind: model.ErrBadResponse},
		{name: "errors in a 200", status: 200, kind: model.ErrNotFound, errno: 2017,
			body: []byte(`{"jobs": [{"job_id": 7}], "errors": [{"error_number": 2017, "error": "Invalid job id specified"}]}`)},
		{name: "bad errors in a 200", status: 200, body: []byte(`{"jobs": [], "errors": 3}`), kind: model.ErrBadResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := serveList(t, v, tt.status, tt.body, tt.cut).ListJobs(context.Background(), time.Time{}, nil)
			assert.Nil(t, got)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.kind)
			var ae *model.APIError
			require.True(t, errors.As(err, &ae), "%v is an *APIError", err)
			assert.Equal(t, "GET /slurm/"+v+"/jobs/", ae.Endpoint)
			if tt.errno != 0 {
				assert.True(t, ae.HasErrno(tt.errno), "errno %d in %v", tt.errno, err)
			}
		})
	}
}

// An answer that reports failure by its status is read whole, as before.
func TestListJobsFailureStatusNotStreamed(t *testing.T) {
	v := "v0.0.42"
	_, err := serveList(t, v, 502, recorded(t, v, "html.502.json"), 0).ListJobs(context.Background(), time.Time{}, nil)
	assert.ErrorIs(t, err, model.ErrUnreachable)
}

// Node listings stream too: the same nodes as the whole answer decoded, and
// a cut connection is the transport's failure.
func TestListNodesStreams(t *testing.T) {
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			body := recorded(t, v, "nodes.200.json")
			whole, last, err := DecodeNodes(body)
			require.NoError(t, err)
			require.NotEmpty(t, whole)
			got, err := serveList(t, v, 200, body, 0).ListNodes(context.Background(), time.Time{})
			require.NoError(t, err)
			assert.Equal(t, whole, got.Nodes)
			assert.Equal(t, last, got.LastUpdate)

			_, err = serveList(t, v, 200, body, len(body)/2).ListNodes(context.Background(), time.Time{})
			assert.ErrorIs(t, err, model.ErrUnreachable)
		})
	}
}
