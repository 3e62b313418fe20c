package scheduler

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSlurmrestd is a small Slurm behind slurmrestd's HTTP API, for the
// integration suite. Its jobs live in memory; every answer is one that the
// lab's real slurmrestd gave (the recordings of ../slurmrest/internal/rest/
// testdata/<version>), with this Slurm's jobs edited into the recorded job
// record. So the scheduler reads them through slurmrest's real client, its
// decoders and its cache, as it reads the real one.
//
// It does what slurmctld does with onepool's requests, no more: a batch job
// waits PENDING until the test starts it; an immediate allocation is granted
// only in partitions the test opened (grantIn), else refused with the
// recorded "Requested nodes are busy" and kept as a FAILED job, as Slurm
// keeps it; a cancel ends the job.
type fakeSlurmrestd struct {
	t       *testing.T
	version string
	dir     string
	srv     *httptest.Server
	// token is the JWT in the scheduler's token file; its "sun" claim is
	// tokenUser, the user of jobs submitted without X-SLURM-USER-NAME.
	token string
	// recordings are the version's recorded answers by what they answer
	// (the file WHAT.STATUS.json), read before the server starts.
	recordings map[string]recording
	// jobTemplate is the recorded job record every job is written into.
	jobTemplate map[string]any

	mu      sync.Mutex
	nextID  uint32
	jobs    map[uint32]*slurmJob
	asks    []slurmAsk
	cancels []uint32
	grants  map[string][]string // partition → the nodes an immediate allocation gets
	badQOS  map[string]bool     // QOS Slurm does not know (submissions refused)
	nodes   map[string]bool     // the Slurm nodes GET /nodes/ lists
	changed time.Time           // the last change of any job (update_time)
	strange []string            // requests this Slurm does not serve
	updates []jobUpdateAsk      // job updates, in order
}

// jobUpdateAsk is one job update as slurmrestd got it.
type jobUpdateAsk struct {
	ID       uint32
	Excluded []string
}

// recording is one recorded answer.
type recording struct {
	status int
	body   []byte
}

// tokenUser is the Slurm user of the fake's token (its "sun" claim).
const tokenUser = "onepool"

// slurmJob is one job as this Slurm holds it.
type slurmJob struct {
	ID                                                 uint32
	Name, Comment, User, Partition, QOS, Account, Tres string
	State, Reason                                      string
	Nodes                                              []string
	GPUs                                               int // per node, from tres_per_node
	Submit, Start, End, Preempt                        time.Time
	TimeLimit                                          time.Duration
	Immediate                                          bool
	nodesAsked                                         string   // the request's "nodes"
	Excluded                                           []string // ExcNodeList, as submitted or updated
}

// slurmAsk is one submission or allocation request as slurmrestd got it.
type slurmAsk struct {
	Path string // "/job/submit" or "/job/allocate"
	User string // X-SLURM-USER-NAME ("" the token's user)
	Job  jobAsk
	ID   uint32 // the job it made; 0 when refused
}

// jobAsk is the job description of a request (the fields onepool sets).
type jobAsk struct {
	Name          string   `json:"name"`
	Comment       string   `json:"comment"`
	Partition     string   `json:"partition"`
	QOS           string   `json:"qos"`
	Account       string   `json:"account"`
	Nodes         string   `json:"nodes"`
	Tasks         int      `json:"tasks"`
	CPUsPerTask   int      `json:"cpus_per_task"`
	TresPerNode   string   `json:"tres_per_node"`
	Script        string   `json:"script"`
	Immediate     bool     `json:"immediate"`
	Requeue       *bool    `json:"requeue"`
	Shared        []string `json:"shared"`
	Environment   []string `json:"environment"`
	TimeLimit     noVal    `json:"time_limit"`
	MemoryPerNode noVal    `json:"memory_per_node"`
	ExcludedNodes []string `json:"excluded_nodes"`
}

type noVal struct {
	Set    bool  `json:"set"`
	Number int64 `json:"number"`
}

// newFakeSlurmrestd serves recorded answers of API version (v0.0.42 or
// v0.0.44) until the test ends.
func newFakeSlurmrestd(t *testing.T, version string) *fakeSlurmrestd {
	t.Helper()
	f := &fakeSlurmrestd{
		t: t, version: version, dir: filepath.Join("..", "slurmrest", "internal", "rest", "testdata", version),
		nextID: 1000, jobs: map[uint32]*slurmJob{}, grants: map[string][]string{}, badQOS: map[string]bool{}, nodes: map[string]bool{}, changed: time.Now(),
	}
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"sun":"` + tokenUser + `","exp":4102444800}`))
	f.token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + claims + ".c2lnbmF0dXJl"
	f.recordings = map[string]recording{}
	files, err := filepath.Glob(filepath.Join(f.dir, "*.json"))
	require.NoError(t, err)
	for _, file := range files {
		parts := strings.Split(filepath.Base(file), ".")
		status, err := strconv.Atoi(parts[len(parts)-2])
		require.NoError(t, err, "%s: no status in the name", file)
		body, err := os.ReadFile(file)
		require.NoError(t, err)
		f.recordings[strings.Join(parts[:len(parts)-2], ".")] = recording{status, body}
	}
	for _, what := range []string{"jobs", "jobs_unchanged", "jobs_state", "job_1", "job_unknown", "submit", "allocate", "allocate_busy", "cancel", "cancel_unknown", "nodes", "ping"} {
		require.Contains(t, f.recordings, what, "%s has no recording of %s", f.dir, what)
	}
	var listing map[string]any
	require.NoError(t, json.Unmarshal(f.recordings["jobs"].body, &listing))
	jobs, _ := listing["jobs"].([]any)
	require.Len(t, jobs, 1, "the recorded listing holds one job")
	f.jobTemplate = jobs[0].(map[string]any)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// tokenFile writes the token where the scheduler reads it.
func (f *fakeSlurmrestd) tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "slurm-token")
	require.NoError(t, os.WriteFile(p, []byte(f.token+"\n"), 0o600))
	return p
}

// recorded is the recorded answer to what (its status and body).
func (f *fakeSlurmrestd) recorded(what string) (int, []byte) {
	r := f.recordings[what]
	return r.status, r.body
}

// edited is the recorded answer to what, decoded, changed by change and
// encoded again.
func (f *fakeSlurmrestd) edited(what string, change func(map[string]any)) (int, []byte) {
	r := f.recordings[what]
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		return http.StatusInternalServerError, []byte(err.Error())
	}
	change(m)
	b, err := json.Marshal(m)
	if err != nil {
		return http.StatusInternalServerError, []byte(err.Error())
	}
	return r.status, b
}

func number(v int64) map[string]any {
	return map[string]any{"set": true, "infinite": false, "number": v}
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// record writes job j into a copy of the recorded job record. Callers hold
// f.mu.
func (f *fakeSlurmrestd) record(j *slurmJob) map[string]any {
	var r map[string]any
	b, _ := json.Marshal(f.jobTemplate)
	_ = json.Unmarshal(b, &r)
	r["job_id"] = j.ID
	r["name"] = j.Name
	r["comment"] = j.Comment
	r["user_name"] = j.User
	r["partition"] = j.Partition
	r["qos"] = j.QOS
	r["account"] = j.Account
	r["tres_per_node"] = j.Tres
	r["job_state"] = []string{j.State}
	r["state_reason"] = j.Reason
	r["nodes"] = strings.Join(j.Nodes, ",")
	r["node_count"] = number(int64(max(1, len(j.Nodes))))
	r["submit_time"] = number(unixOrZero(j.Submit))
	r["start_time"] = number(unixOrZero(j.Start))
	r["end_time"] = number(unixOrZero(j.End))
	r["preempt_time"] = number(unixOrZero(j.Preempt))
	r["time_limit"] = number(int64(j.TimeLimit / time.Minute))
	if len(j.Nodes) == 0 {
		delete(r, "job_resources")
		r["gres_detail"] = []string{}
		return r
	}
	res := r["job_resources"].(map[string]any)
	nodes := res["nodes"].(map[string]any)
	alloc := nodes["allocation"].([]any)[0].(map[string]any)
	var allocs []any
	var gres []string
	for i, n := range j.Nodes {
		a := map[string]any{}
		for k, v := range alloc {
			a[k] = v
		}
		a["index"], a["name"] = i, n
		allocs = append(allocs, a)
		if j.GPUs > 0 {
			gres = append(gres, fmt.Sprintf("gpu:h100:%d(IDX:0-%d)", j.GPUs, j.GPUs-1))
		} else {
			gres = append(gres, "")
		}
	}
	nodes["allocation"], nodes["list"], nodes["count"] = allocs, strings.Join(j.Nodes, ","), len(j.Nodes)
	r["gres_detail"] = gres
	return r
}

func (f *fakeSlurmrestd) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	prefix := "/slurm/" + f.version
	path, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok || r.Header.Get("X-SLURM-USER-TOKEN") != f.token {
		f.refuse(w, r, "not this version, or not the token")
		return
	}
	answer := func(status int, b []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	q := r.URL.Query()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && path == "/jobs/":
		if s := q.Get("update_time"); s != "" {
			since, err := strconv.ParseInt(s, 10, 64)
			if err == nil && f.changed.Unix() < since {
				answer(f.recorded("jobs_unchanged"))
				return
			}
		}
		// 24.11 answers a delta with every job once one changed.
		answer(f.edited("jobs", func(m map[string]any) {
			m["jobs"] = f.recordsLocked(nil)
			m["last_update"] = number(f.changed.Unix())
		}))
	case r.Method == http.MethodGet && path == "/ping/":
		answer(f.recorded("ping"))
	case r.Method == http.MethodGet && path == "/jobs/state/":
		var ids []uint32
		for _, s := range q["job_id"] {
			id, _ := strconv.ParseUint(s, 10, 32)
			ids = append(ids, uint32(id))
		}
		answer(f.edited("jobs_state", func(m map[string]any) {
			var states []any
			for _, id := range f.idsLocked() {
				if len(ids) > 0 && !slices.Contains(ids, id) {
					continue
				}
				states = append(states, map[string]any{"job_id": strconv.FormatUint(uint64(id), 10), "state": []string{f.jobs[id].State}})
			}
			m["jobs"] = states
		}))
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/job/"):
		j := f.jobs[jobIDIn(path)]
		if j == nil {
			answer(f.recorded("job_unknown"))
			return
		}
		answer(f.edited("job_1", func(m map[string]any) {
			m["jobs"] = []any{f.record(j)}
		}))
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/job/"):
		id := jobIDIn(path)
		j := f.jobs[id]
		if j == nil {
			answer(f.recorded("cancel_unknown"))
			return
		}
		f.cancels = append(f.cancels, id)
		if !finishedState(j.State) {
			j.State, j.Reason, j.End = "CANCELLED", "None", time.Now()
			f.changed = time.Now()
		}
		answer(f.recorded("cancel"))
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/job/") && path != "/job/submit" && path != "/job/allocate":
		// An update: only excluded_nodes is one onepool sends. Slurm
		// 24.11 keeps ExcNodeList on an empty list; [""] clears it.
		j := f.jobs[jobIDIn(path)]
		var req struct {
			Excluded *[]string `json:"excluded_nodes"`
		}
		if err := json.Unmarshal(body, &req); err != nil || j == nil || req.Excluded == nil {
			f.refuseLocked(w, r, "an update this Slurm does not take")
			return
		}
		j.Excluded = slices.DeleteFunc(slices.Clone(*req.Excluded), func(s string) bool { return s == "" })
		f.updates = append(f.updates, jobUpdateAsk{ID: j.ID, Excluded: j.Excluded})
		answer(f.recorded("update_job"))
	case r.Method == http.MethodPost && (path == "/job/submit" || path == "/job/allocate"):
		var req struct {
			Job jobAsk `json:"job"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			f.refuse(w, r, "a body that is not a job: "+err.Error())
			return
		}
		ask := slurmAsk{Path: path, User: r.Header.Get("X-SLURM-USER-NAME"), Job: req.Job}
		if f.badQOS[req.Job.QOS] {
			// No recording of this refusal: the recorded refusal's
			// envelope and status, with Slurm's number for it.
			f.asks = append(f.asks, ask)
			answer(f.edited("allocate_busy", func(m map[string]any) {
				e := m["errors"].([]any)[0].(map[string]any)
				e["error_number"], e["error"], e["description"] = 2066, "Invalid qos specification", "Batch job submission failed"
			}))
			return
		}
		j := f.newJobLocked(ask)
		if path == "/job/allocate" {
			nodes, open := f.grants[j.Partition]
			if !open {
				// Slurm keeps the refused allocation as a FAILED job.
				j.State, j.Reason, j.End = "FAILED", "Resources", time.Now()
				f.asks = append(f.asks, ask)
				answer(f.recorded("allocate_busy"))
				return
			}
			n, _ := strconv.Atoi(j.nodesAsked)
			j.State, j.Reason, j.Start, j.Nodes = "RUNNING", "None", time.Now(), nodes[:max(1, n)]
			j.End = j.Start.Add(j.TimeLimit)
		}
		ask.ID = j.ID
		f.asks = append(f.asks, ask)
		answer(f.edited(strings.TrimPrefix(path, "/job/"), func(m map[string]any) { m["job_id"] = j.ID }))
	case r.Method == http.MethodGet && path == "/nodes/":
		// Every node the test's Nodes name, from the recorded listing's
		// first node.
		answer(f.edited("nodes", func(m map[string]any) {
			tmpl := m["nodes"].([]any)[0].(map[string]any)
			var nodes []any
			for _, n := range slices.Sorted(maps.Keys(f.nodes)) {
				c := maps.Clone(tmpl)
				c["name"], c["hostname"] = n, n
				nodes = append(nodes, c)
			}
			m["nodes"] = nodes
		}))
	default:
		f.refuseLocked(w, r, "no such endpoint here")
	}
}

// excluded is the job's ExcNodeList now.
func (f *fakeSlurmrestd) excluded(id uint32) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[id]; j != nil {
		return slices.Clone(j.Excluded)
	}
	return nil
}

// updatesOf are the updates the job got.
func (f *fakeSlurmrestd) updatesOf(id uint32) []jobUpdateAsk {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jobUpdateAsk
	for _, u := range f.updates {
		if u.ID == id {
			out = append(out, u)
		}
	}
	return out
}

// addNode makes Slurm know a node (GET /nodes/ lists it).
func (f *fakeSlurmrestd) addNode(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[name] = true
}

func (f *fakeSlurmrestd) refuse(w http.ResponseWriter, r *http.Request, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseLocked(w, r, why)
}

func (f *fakeSlurmrestd) refuseLocked(w http.ResponseWriter, r *http.Request, why string) {
	f.strange = append(f.strange, r.Method+" "+r.URL.String()+": "+why)
	http.Error(w, why, http.StatusTeapot)
}

func jobIDIn(path string) uint32 {
	id, _ := strconv.ParseUint(strings.TrimPrefix(path, "/job/"), 10, 32)
	return uint32(id)
}

func finishedState(s string) bool { return s != "PENDING" && s != "RUNNING" }

// newJobLocked makes the job a request asks for, PENDING.
func (f *fakeSlurmrestd) newJobLocked(a slurmAsk) *slurmJob {
	f.nextID++
	user := a.User
	if user == "" {
		user = tokenUser
	}
	j := &slurmJob{
		ID: f.nextID, Name: a.Job.Name, Comment: a.Job.Comment, User: user, Partition: a.Job.Partition,
		QOS: a.Job.QOS, Account: a.Job.Account, Tres: a.Job.TresPerNode, State: "PENDING", Reason: "Resources",
		Submit: time.Now(), TimeLimit: time.Duration(a.Job.TimeLimit.Number) * time.Minute, Immediate: a.Job.Immediate,
		nodesAsked: a.Job.Nodes, Excluded: a.Job.ExcludedNodes,
	}
	if n, ok := strings.CutPrefix(a.Job.TresPerNode, "gres/gpu:"); ok {
		j.GPUs, _ = strconv.Atoi(n)
	}
	if j.Partition == "" {
		j.Partition = "main"
	}
	if j.TimeLimit == 0 {
		j.TimeLimit = time.Hour
	}
	f.jobs[j.ID] = j
	f.changed = time.Now()
	return j
}

func (f *fakeSlurmrestd) idsLocked() []uint32 {
	ids := make([]uint32, 0, len(f.jobs))
	for id := range f.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (f *fakeSlurmrestd) recordsLocked(ids []uint32) []any {
	if ids == nil {
		ids = f.idsLocked()
	}
	out := make([]any, 0, len(ids))
	for _, id := range ids {
		out = append(out, f.record(f.jobs[id]))
	}
	return out
}

// change edits job id as slurmctld would, under the lock.
func (f *fakeSlurmrestd) change(id uint32, edit func(j *slurmJob)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		f.t.Errorf("Slurm has no job %d", id) // not FailNow: a subtest's goroutine may call
		return
	}
	edit(j)
	f.changed = time.Now()
}

// start runs a pending job on nodes.
func (f *fakeSlurmrestd) start(id uint32, nodes ...string) {
	f.change(id, func(j *slurmJob) {
		j.State, j.Reason, j.Start, j.Nodes = "RUNNING", "None", time.Now(), nodes
		j.End = j.Start.Add(j.TimeLimit)
	})
}

// end ends a job in state (TIMEOUT, CANCELLED, FAILED, ...).
func (f *fakeSlurmrestd) end(id uint32, state string) {
	f.change(id, func(j *slurmJob) { j.State, j.End = state, time.Now() })
}

// preempt begins preempting a running job: it stays RUNNING until the
// QOS's GraceTime ends (its end_time).
func (f *fakeSlurmrestd) preempt(id uint32, grace time.Duration) {
	f.change(id, func(j *slurmJob) { j.Preempt, j.End = time.Now(), time.Now().Add(grace) })
}

// grantIn makes immediate allocations in partition succeed, on nodes.
func (f *fakeSlurmrestd) grantIn(partition string, nodes ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grants[partition] = nodes
}

// refuseQOS makes Slurm refuse jobs asking qos, as an unknown QOS.
func (f *fakeSlurmrestd) refuseQOS(qos string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.badQOS[qos] = true
}

// asksFor lists the requests for the job named name, in order.
func (f *fakeSlurmrestd) asksFor(name string) []slurmAsk {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slurmAsk
	for _, a := range f.asks {
		if a.Job.Name == name {
			out = append(out, a)
		}
	}
	return out
}

// submitsFor lists the batch submissions for the job named name.
func (f *fakeSlurmrestd) submitsFor(name string) []slurmAsk {
	var out []slurmAsk
	for _, a := range f.asksFor(name) {
		if a.Path == "/job/submit" {
			out = append(out, a)
		}
	}
	return out
}

// cancelled says whether job id was asked to be cancelled.
func (f *fakeSlurmrestd) cancelled(id uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.cancels, id)
}

// state is job id's state now.
func (f *fakeSlurmrestd) state(id uint32) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[id]; j != nil {
		return j.State
	}
	return ""
}

// unserved lists the requests this Slurm could not answer.
func (f *fakeSlurmrestd) unserved() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.strange)
}
