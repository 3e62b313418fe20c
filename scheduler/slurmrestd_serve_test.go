package scheduler

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serve answers the fake's HTTP requests, as slurmrestd would.
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
