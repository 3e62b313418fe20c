package slurmrest

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The answers replayed here were recorded from the lab's real slurmrestd
// with curl: Slurm 24.11.5 for v0.0.42, 26.05.5 for v0.0.44; see
// internal/rest/testdata/<version>.
func recorded(version string) string { return filepath.Join("internal", "rest", "testdata", version) }

const testToken = "replay-secret-token-value"

// replay serves recorded answers of one API version. Each route maps
// "METHOD /path?query" (the part after /slurm/<version>) to a recorded
// file named NAME.STATUS.json.
type replay struct {
	t       *testing.T
	version string
	routes  map[string]string
	token   string // the token requests must carry (testToken when empty)
	// delay holds a route's answer back this long (a slow listing).
	delay  map[string]time.Duration
	mu     sync.Mutex
	seen   []*http.Request
	bodies []string
}

// requests lists what the client asked, as route keys, in order.
func (rp *replay) requests() []string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	var out []string
	for _, r := range rp.seen {
		key := r.Method + " " + rp.path(r.URL.Path)
		if r.URL.RawQuery != "" {
			key += "?" + r.URL.RawQuery
		}
		out = append(out, key)
	}
	return out
}

// path is a request's path as routes name it: after /slurm/<version>, or
// /slurmdb and what follows /slurmdb/<version>.
func (rp *replay) path(p string) string {
	if rest, ok := strings.CutPrefix(p, "/slurmdb/"+rp.version); ok {
		return "/slurmdb" + rest
	}
	return strings.TrimPrefix(p, "/slurm/"+rp.version)
}

func (rp *replay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rp.mu.Lock()
	rp.seen = append(rp.seen, r)
	rp.bodies = append(rp.bodies, string(body))
	rp.mu.Unlock()
	if want := cmp.Or(rp.token, testToken); r.Header.Get("X-SLURM-USER-TOKEN") != want {
		rp.t.Errorf("%s %s: token header %q", r.Method, r.URL, r.Header.Get("X-SLURM-USER-TOKEN"))
	}
	key := r.Method + " " + rp.path(r.URL.Path)
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	rp.mu.Lock()
	file, ok := rp.routes[key]
	wait := rp.delay[key]
	rp.mu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		rp.t.Errorf("unexpected request %q", key)
		http.Error(w, "no recording", http.StatusTeapot)
		return
	}
	parts := strings.Split(file, ".")
	status, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		rp.t.Fatalf("recording %s: no status in name", file)
	}
	data, err := os.ReadFile(filepath.Join(recorded(rp.version), file))
	if err != nil && status != http.StatusNotModified {
		rp.t.Fatal(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// set answers key with file from now on.
func (rp *replay) set(key, file string) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.routes[key] = file
}

// newReplay replays v0.0.42 (Slurm 24.11) answers to a client that speaks it.
func newReplay(t *testing.T, routes map[string]string) (*Client, *replay) {
	t.Helper()
	return newReplayVersion(t, "v0.0.42", routes)
}

func newReplayVersion(t *testing.T, version string, routes map[string]string) (*Client, *replay) {
	t.Helper()
	return newReplayConfig(t, version, routes, nil)
}

// newReplayConfig is newReplayVersion with the client's config edited by
// edit (nil: none).
func newReplayConfig(t *testing.T, version string, routes map[string]string, edit func(*Config)) (*Client, *replay) {
	t.Helper()
	rp := &replay{t: t, version: version, routes: routes}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: srv.URL, TokenFile: tokenFile, Timeout: 5 * time.Second, APIVersion: version}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, rp
}

func noToken(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testToken) {
		t.Errorf("error shows the token: %v", err)
	}
}

func TestReplayNodes(t *testing.T) {
	ctx := context.Background()
	since := time.Unix(1795229300, 0)
	c, rp := newReplay(t, map[string]string{
		"GET /nodes/":                        "nodes.200.json",
		"GET /nodes/?update_time=1795229300": "nodes_unchanged.304.json",
		"GET /node/gpu-0":                    "node_gpu-0.200.json",
		"GET /node/no-such-node":             "node_unknown.200.json",
		"POST /node/no-such-node":            "drain_unknown.500.json",
		"POST /node/gpu-0":                   "resume_not_drained.500.json",
		"GET /partitions/":                   "partitions.200.json",
	})
	list, err := c.ListNodes(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Nodes) != 4 || list.LastUpdate.Unix() != 1795229216 {
		t.Fatalf("ListNodes: %d nodes, last update %v; recorded 4 and 1795229216", len(list.Nodes), list.LastUpdate.Unix())
	}
	for i, n := range list.Nodes {
		if n.Name != "gpu-"+strconv.Itoa(i) || n.Gres != "gpu:h100:8" || n.CPUs != 64 || n.State.Base() != NodeIdle || n.State.Drain() {
			t.Errorf("node %d: %+v", i, n)
		}
	}
	unchanged, err := c.ListNodes(ctx, since)
	if err != nil || unchanged != nil {
		t.Errorf("ListNodes since (304): %v, %v; want nil, nil", unchanged, err)
	}
	n, err := c.GetNode(ctx, "gpu-0")
	if err != nil || n.Name != "gpu-0" || n.Gres != "gpu:h100:8" {
		t.Errorf("GetNode(gpu-0) = %+v, %v", n, err)
	}
	_, err = c.GetNode(ctx, "no-such-node")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("GetNode(no-such-node): HTTP 200 with an error must be ErrNotFound, got %v", err)
	}
	err = c.Drain(ctx, "no-such-node", "maintenance")
	var ae *APIError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ae) || !ae.HasErrno(2018) || ae.StatusCode != 500 {
		t.Errorf("Drain(no-such-node) = %v; want ErrNotFound with errno 2018 and HTTP 500", err)
	}
	// 2028, and the node reads back IDLE: the resume is done.
	if err := c.Resume(ctx, "gpu-0"); err != nil {
		t.Errorf("Resume(gpu-0) of a node not drained = %v; want nil (it reads back IDLE)", err)
	}
	rp.mu.Lock()
	drainBody := ""
	for _, b := range rp.bodies {
		if strings.Contains(b, `"DRAIN"`) {
			drainBody = b
		}
	}
	rp.mu.Unlock()
	if !strings.Contains(drainBody, `"DRAIN"`) || !strings.Contains(drainBody, `"reason":"maintenance"`) {
		t.Errorf("drain request body %s: want state DRAIN and the reason", drainBody)
	}
	parts, err := c.ListPartitions(ctx)
	if err != nil || len(parts) != 1 || parts[0].Name != "main" || parts[0].TotalNodes != 4 || parts[0].Nodes != "gpu-[0-3]" {
		t.Errorf("ListPartitions = %+v, %v", parts, err)
	}
}

// 24.11.5 answers update_time polls with HTTP 500 "Unable to query
// partitions" when only nodes changed: the client lists in full instead.
func TestReplayNodesPartitionBug(t *testing.T) {
	c, rp := newReplay(t, map[string]string{
		"GET /nodes/?update_time=1795229221": "nodes_since_changed.500.json",
		"GET /nodes/":                        "nodes.200.json",
	})
	list, err := c.ListNodes(context.Background(), time.Unix(1795229221, 0))
	if err != nil || list == nil || len(list.Nodes) != 4 {
		t.Fatalf("ListNodes after the 500: %v, %v; want the full listing", list, err)
	}
	if len(rp.seen) != 2 {
		t.Errorf("%d requests, want 2 (the delta, then the full listing)", len(rp.seen))
	}
}

func TestReplayJobs(t *testing.T) {
	ctx := context.Background()
	c, rp := newReplay(t, map[string]string{
		"GET /jobs/":                              "jobs.200.json",
		"GET /jobs/?update_time=1795229225":       "jobs_unchanged.200.json",
		"GET /job/1":                              "job_1.200.json",
		"GET /job/999999":                         "job_unknown.404.json",
		"GET /jobs/state/?job_id=1&job_id=999999": "jobs_state.200.json",
		"POST /job/submit":                        "submit.200.json",
		"DELETE /job/1":                           "cancel.200.json",
		"DELETE /job/999999":                      "cancel_unknown.200.json",
	})
	list, err := c.ListJobs(ctx, time.Time{})
	if err != nil || len(list.Jobs) != 1 {
		t.Fatalf("ListJobs = %v, %v", list, err)
	}
	j := list.Jobs[0]
	if j.ID != 1 || j.Name != "rec" || j.State.Base() != JobRunning || j.Nodes == "" || j.Partition != "main" || j.Comment != "recorded" || j.TresPerNode != "gres/gpu:8" {
		t.Errorf("job: %+v", j)
	}
	if j.TimeLimit != 0 {
		t.Errorf("the recorded job runs UNLIMITED (time_limit infinite); TimeLimit = %s", j.TimeLimit)
	}
	if j.SubmitTime.IsZero() || j.StartTime.IsZero() || !j.EndTime.After(j.StartTime) {
		t.Errorf("job times: submit %v start %v end %v", j.SubmitTime, j.StartTime, j.EndTime)
	}
	if unchanged, err := c.ListJobs(ctx, time.Unix(1795229225, 0)); err != nil || unchanged != nil {
		t.Errorf("ListJobs since, unchanged: %v, %v; want nil, nil", unchanged, err)
	}
	if got, err := c.GetJob(ctx, 1); err != nil || got.ID != 1 {
		t.Errorf("GetJob(1) = %+v, %v", got, err)
	} else if idx, err := got.GPUIndexes(got.Nodes); err != nil || len(idx) != 8 || idx[0] != 0 || idx[7] != 7 {
		// slurmrestd's gres_detail, paired with job_resources' node.
		t.Errorf("GetJob(1).GPUIndexes(%s) = %v, %v; GresDetail %v", got.Nodes, idx, err, got.GresDetail)
	}
	if got, err := c.GetJob(ctx, 1); err != nil || got.ID != 1 {
		t.Errorf("GetJob(1) = %+v, %v", got, err)
	}
	if _, err := c.GetJob(ctx, 999999); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetJob(999999) = %v, want ErrNotFound", err)
	}
	states, err := c.JobStates(ctx, []uint32{1, 999999})
	if err != nil || len(states) != 1 || states[0].ID != 1 || states[0].State.Base() != JobRunning {
		t.Errorf("JobStates = %+v, %v", states, err)
	}
	id, err := c.SubmitJob(ctx, JobSubmit{Name: "rec", Script: "#!/bin/sh\nsleep 600\n", Partition: "main", Nodes: "1", Tasks: 1, TresPerNode: "gres/gpu:8"})
	if err != nil || id != 1 {
		t.Errorf("SubmitJob = %d, %v", id, err)
	}
	if err := c.CancelJob(ctx, 1); err != nil {
		t.Errorf("CancelJob(1) = %v", err)
	}
	if err := c.CancelJob(ctx, 999999); !errors.Is(err, ErrNotFound) {
		t.Errorf("CancelJob(999999): HTTP 200 with status error 2017 must be ErrNotFound, got %v", err)
	}
	if _, err := c.SubmitJob(ctx, JobSubmit{Name: "no script"}); err == nil {
		t.Error("SubmitJob without a script succeeded")
	}
	_ = rp
}

func TestReplayAuthAndBrokenAnswers(t *testing.T) {
	ctx := context.Background()
	c, _ := newReplay(t, map[string]string{
		"GET /nodes/":                        "token_garbage.511.json",
		"GET /jobs/":                         "token_missing.401.json",
		"GET /nodes/?update_time=1795229300": "truncated.200.json",
		"GET /jobs/?update_time=1795229300":  "html.502.json",
	})
	_, err := c.ListNodes(ctx, time.Time{})
	var ae *APIError
	if !errors.Is(err, ErrUnauthenticated) || !errors.As(err, &ae) || ae.StatusCode != 511 || !ae.HasErrno(1007) {
		t.Errorf("expired token: %v; want ErrUnauthenticated, HTTP 511, errno 1007", err)
	}
	noToken(t, err)
	_, err = c.ListJobs(ctx, time.Time{})
	if !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no token (401, plain text): %v; want ErrUnauthenticated", err)
	}
	noToken(t, err)
	_, err = c.ListNodes(ctx, time.Unix(1795229300, 0))
	if !errors.Is(err, ErrBadResponse) {
		t.Errorf("truncated JSON with HTTP 200: %v; want ErrBadResponse", err)
	}
	_, err = c.ListJobs(ctx, time.Unix(1795229300, 0))
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("HTTP 502 from a proxy: %v; want ErrUnreachable", err)
	}
}

func TestUnreachableWithinDeadline(t *testing.T) {
	// A server that accepts and never answers.
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	t.Cleanup(func() { close(block); srv.Close() })
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{URL: srv.URL, TokenFile: tokenFile, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListNodes(context.Background(), time.Time{})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("hung server: %v; want ErrUnreachable", err)
	}
	noToken(t, err)
}

func TestEndpointLabel(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/slurm/v0.0.42/nodes/", "GET /nodes"},
		{"GET", "/slurm/v0.0.42/node/gpu-17", "GET /node/{name}"},
		{"POST", "/slurm/v0.0.42/job/submit", "POST /job/submit"},
		{"POST", "/slurm/v0.0.42/job/allocate", "POST /job/allocate"},
		{"DELETE", "/slurm/v0.0.42/job/12345", "DELETE /job/{id}"},
		{"GET", "/slurm/v0.0.42/jobs/state/", "GET /jobs/state"},
	} {
		if got := endpointLabel(tc.method, tc.path); got != tc.want {
			t.Errorf("endpointLabel(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// An allocation Slurm grants inside the request, and one it refuses at once
// because every node is busy: the refusal is a typed Slurm answer (2016),
// not a transport error, so the scheduler knows nothing was granted.
func TestReplayAllocateNow(t *testing.T) {
	ctx := context.Background()
	j := JobSubmit{Name: "onepool/ns/p", Comment: "onepool:pod=ns/p;uid=u1", Partition: "main", Nodes: "1", Tasks: 1, TresPerNode: "gres/gpu:2"}
	c, rp := newReplay(t, map[string]string{"POST /job/allocate": "allocate.200.json"})
	id, err := c.AllocateNow(ctx, j)
	if err != nil || id != 1298 {
		t.Fatalf("AllocateNow = %d, %v; recorded job 1298", id, err)
	}
	if body := rp.bodies[0]; !strings.Contains(body, `"immediate":true`) || strings.Contains(body, `"script"`) {
		t.Errorf("allocation request %s: want immediate and no script", body)
	}
	if _, err := c.AllocateNow(ctx, JobSubmit{Name: "x", Script: "#!/bin/sh\n"}); err == nil {
		t.Error("AllocateNow took a script")
	}

	c, _ = newReplay(t, map[string]string{"POST /job/allocate": "allocate_busy.500.json"})
	_, err = c.AllocateNow(ctx, j)
	var ae *APIError
	if !errors.As(err, &ae) || !errors.Is(err, ErrSlurm) || !ae.HasErrno(2016) || ae.StatusCode != 500 {
		t.Fatalf("AllocateNow on busy nodes = %v; want an APIError with Slurm error 2016", err)
	}
	noToken(t, err)
}
