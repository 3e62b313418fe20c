package scheduler

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
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
