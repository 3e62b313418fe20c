package rest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onepool/onepool/slurmrest/model"
)

// Paths after /slurm/<version>.
const (
	pathJobs      = "/jobs/"
	pathJob       = "/job/{job_id}"
	pathJobsState = "/jobs/state/"
	pathSubmit    = "/job/submit"
	pathAllocate  = "/job/allocate"
)

// ListJobs lists jobs, streaming the answer: keep (nil: all) says which
// jobs the list holds, so memory follows the jobs kept, not the answer
// (50,000 foreign jobs on 24.11: 228 MB); Listed counts them all. With since
// set, an unchanged job table gives HTTP 200 with no jobs and last_update 0:
// that is "no change", returned as nil.
func (b *Backend) ListJobs(ctx context.Context, since time.Time, keep func(*model.Job) bool) (*model.JobList, error) {
	sink := &jobSink{keep: keep}
	r, err := b.call(ctx, request{op: "list jobs", method: http.MethodGet, path: pathJobs, query: sinceQuery(since),
		streamKey: "jobs", elem: sink.elem})
	if err != nil {
		return nil, err
	}
	last, err := r.members.lastUpdate()
	if err != nil {
		return nil, badResponse("list jobs", b.endpoint(http.MethodGet, pathJobs), r, "%w", err)
	}
	if !since.IsZero() && sink.n == 0 && unixTime(&last).IsZero() {
		return nil, nil
	}
	return &model.JobList{Jobs: sink.jobs, Listed: sink.n, LastUpdate: unixTime(&last)}, nil
}

// jobSink converts the jobs of a listing as they are decoded, holding those
// keep accepts (nil: all); n counts every job read.
type jobSink struct {
	keep func(*model.Job) bool
	jobs []model.Job
	n    int
}

func (s *jobSink) elem(d *json.Decoder) error {
	var w wireJob
	if err := d.Decode(&w); err != nil {
		return fmt.Errorf("job %d: %w", s.n, err)
	}
	j, err := toJob(&w, s.n)
	if err != nil {
		return err
	}
	s.n++
	if s.keep == nil || s.keep(&j) {
		s.jobs = append(s.jobs, j)
	}
	return nil
}

// GetJob reads one job; 404 with Slurm error 2017 is ErrNotFound.
func (b *Backend) GetJob(ctx context.Context, id uint32) (*model.Job, error) {
	op := fmt.Sprintf("get job %d", id)
	ep := b.endpoint(http.MethodGet, pathJob)
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathJob, args: []string{jobArg(id)}})
	if err != nil {
		return nil, err
	}
	jobs, _, err := DecodeJobs(r.body)
	if err != nil {
		return nil, badResponse(op, ep, r, "%w", err)
	}
	for i := range jobs {
		if jobs[i].ID == id {
			return &jobs[i], nil
		}
	}
	return nil, &model.APIError{Op: op, Endpoint: ep, StatusCode: r.status, Kind: model.ErrNotFound,
		Err: fmt.Errorf("the answer holds no job %d", id)}
}

// jobsStateResp is the /jobs/state/ answer. The spec calls it a job_info
// listing, but 24.11 sends only job_id (as a string) and state.
type jobsStateResp struct {
	Jobs []struct {
		JobID json.RawMessage `json:"job_id"`
		State []string        `json:"state"`
	} `json:"jobs"`
}

// JobStates reads the light id+state listing for ids. slurmrestd wants one
// job_id parameter per id; ids it does not know are left out of the answer.
func (b *Backend) JobStates(ctx context.Context, ids []uint32) ([]model.JobStateEntry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q := url.Values{}
	for _, id := range ids {
		q.Add("job_id", jobArg(id))
	}
	return b.jobStates(ctx, fmt.Sprintf("job states of %d jobs", len(ids)), q)
}

// jobStates reads /jobs/state/ with query q (nil: every job).
func (b *Backend) jobStates(ctx context.Context, op string, q url.Values) ([]model.JobStateEntry, error) {
	r, err := b.call(ctx, request{op: op, method: http.MethodGet, path: pathJobsState, query: q})
	if err != nil {
		return nil, err
	}
	out, err := DecodeJobStates(r.body)
	if err != nil {
		return nil, badResponse(op, b.endpoint(http.MethodGet, pathJobsState), r, "%w", err)
	}
	return out, nil
}

// AllJobStates reads the light id+state listing of every job Slurm holds.
func (b *Backend) AllJobStates(ctx context.Context) ([]model.JobStateEntry, error) {
	return b.jobStates(ctx, "job states", nil)
}

// DecodeJobStates reads a /jobs/state/ answer.
func DecodeJobStates(body []byte) ([]model.JobStateEntry, error) {
	var resp jobsStateResp
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, err
	}
	out := make([]model.JobStateEntry, 0, len(resp.Jobs))
	seen := make(map[uint32]bool, len(resp.Jobs))
	for _, j := range resp.Jobs {
		id, ok, err := jobStateID(j.JobID)
		if err != nil {
			return nil, err
		}
		if ok && !seen[id] {
			seen[id] = true
			out = append(out, model.JobStateEntry{ID: id, State: model.JobState(j.State)})
		}
	}
	return out, nil
}

// jobStateID reads a /jobs/state/ job_id. Besides a plain id, Slurm names
// an array's records there "<job_id>_<task>": a task with a record of its
// own ("5_1": job 5, task 1 of array 4), and once per task still pending
// in the array's own record ("4_0", "4_2", "4_3": job 4, whose
// array_task_string is "0,2-3"; 24.11.5 and 26.05.5 alike, recorded in
// testdata/*/jobs_state_array.200.json), or "<job_id>_[<tasks>]". The
// number before the "_" is the record's job_id, as in /jobs/; the
// decoder keeps one entry per record. A heterogeneous job's component
// ("<id>+<offset>") is left out (ok false): which record it names is not
// proven here, and the callers read a job the answer lacks by its id (the
// cache lists, the job watch reads it whole). Anything else is an error.
func jobStateID(raw json.RawMessage) (id uint32, ok bool, err error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
	}
	head, tail := s, ""
	if i := strings.IndexAny(s, "_+"); i >= 0 {
		head, tail = s[:i], s[i:]
	}
	n, perr := strconv.ParseUint(head, 10, 32)
	switch {
	case perr != nil || n == 0 || !validJobSuffix(tail):
		return 0, false, fmt.Errorf("job id %q is not a job id", s)
	case strings.HasPrefix(tail, "+"):
		return 0, false, nil
	}
	return uint32(n), true, nil
}

// validJobSuffix says whether tail is what Slurm writes after a job id in
// /jobs/state/: nothing, "_<task>", "_[<task ranges>]" or "+<offset>".
func validJobSuffix(tail string) bool {
	switch {
	case tail == "":
		return true
	case strings.HasPrefix(tail, "_["):
		inner, closed := strings.CutSuffix(tail[2:], "]")
		return closed && inner != "" && strings.Trim(inner, "0123456789,-:%") == ""
	case strings.HasPrefix(tail, "_"), strings.HasPrefix(tail, "+"):
		_, err := strconv.ParseUint(tail[1:], 10, 32)
		return err == nil
	}
	return false
}

func jobArg(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

// SubmitJob submits a batch job and returns its id.
func (b *Backend) SubmitJob(ctx context.Context, j model.JobSubmit) (uint32, error) {
	op := "submit job " + j.Name
	if j.Script == "" {
		return 0, fmt.Errorf("slurmrest: %s: a batch job needs a script", op)
	}
	desc, err := newJobDesc(op, j)
	if err != nil {
		return 0, err
	}
	desc.Script = ptr(j.Script)
	return b.postJob(ctx, op, pathSubmit, desc)
}

// AllocateNow asks for an allocation without a script that Slurm grants
// inside the request or refuses at once (salloc --immediate): Slurm
// schedules it in the RPC when the resources are free and it would be the
// top-priority job.
func (b *Backend) AllocateNow(ctx context.Context, j model.JobSubmit) (uint32, error) {
	op := "allocate job " + j.Name
	if j.Script != "" {
		return 0, fmt.Errorf("slurmrest: %s: an allocation runs no script", op)
	}
	desc, err := newJobDesc(op, j)
	if err != nil {
		return 0, err
	}
	desc.Immediate = ptr(true)
	return b.postJob(ctx, op, pathAllocate, desc)
}

// postJob sends a submission or an allocation request and reads the id
// of the job Slurm made.
func (b *Backend) postJob(ctx context.Context, op, path string, desc jobDesc) (uint32, error) {
	r, err := b.call(ctx, request{op: op, method: http.MethodPost, path: path, body: jobReq{Job: &desc}})
	if err != nil {
		return 0, err
	}
	ep := b.endpoint(http.MethodPost, path)
	var resp jobIDResp
	if err := decode(op, ep, r, &resp); err != nil {
		return 0, err
	}
	if resp.JobId == nil || *resp.JobId <= 0 || *resp.JobId > math.MaxUint32 {
		return 0, badResponse(op, ep, r, "the answer holds no job id")
	}
	return uint32(*resp.JobId), nil
}

// jobDesc is what a batch job and an allocation have in common.
func newJobDesc(op string, j model.JobSubmit) (jobDesc, error) {
	env := j.Environment
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"} // slurmrestd refuses a job without environment
	}
	desc := jobDesc{
		Name:                    ptr(j.Name),
		Environment:             &env,
		CurrentWorkingDirectory: ptr(cmp.Or(j.WorkDir, "/tmp")),
	}
	if j.Partition != "" {
		desc.Partition = ptr(j.Partition)
	}
	if j.Nodes != "" {
		desc.Nodes = ptr(j.Nodes)
	}
	if j.Tasks > 0 {
		desc.Tasks = ptr(int32(j.Tasks))
	}
	if j.TresPerNode != "" {
		desc.TresPerNode = ptr(j.TresPerNode)
	}
	if j.Comment != "" {
		desc.Comment = ptr(j.Comment)
	}
	switch {
	case j.TimeLimit == model.UnlimitedTime:
		desc.TimeLimit = &noVal32{Set: ptr(true), Infinite: ptr(true)}
	case j.TimeLimit > 0:
		desc.TimeLimit = minutes(j.TimeLimit)
	}
	if j.Hold {
		desc.Hold = ptr(true)
	}
	if j.Priority > 0 {
		desc.Priority = number(int64(j.Priority))
	}
	if j.QOS != "" {
		desc.Qos = ptr(j.QOS)
	}
	if j.Account != "" {
		desc.Account = ptr(j.Account)
	}
	if j.CPUsPerTask > 0 {
		desc.CpusPerTask = ptr(int32(j.CPUsPerTask))
	}
	if j.MemoryPerNodeMB > 0 {
		desc.MemoryPerNode = number(j.MemoryPerNodeMB)
	}
	if j.NoRequeue {
		desc.Requeue = ptr(false)
	}
	if len(j.ExcludedNodes) > 0 {
		desc.ExcludedNodes = ptr(slices.Clone(j.ExcludedNodes))
	}
	switch j.Sharing {
	case model.SharingDefault:
	case model.SharingExclusive:
		desc.Shared = &[]string{"none"}
	case model.SharingUser:
		desc.Shared = &[]string{"user"}
	default:
		return desc, fmt.Errorf("%s: unknown sharing %q", op, j.Sharing)
	}
	return desc, nil
}

func minutes(d time.Duration) *noVal32 { return number(int64((d + time.Minute - 1) / time.Minute)) }

// updateDesc is the job description of an update: only what u sets.
func updateDesc(u model.JobUpdate) jobDesc {
	desc := jobDesc{Comment: u.Comment, Hold: u.Hold}
	if u.Priority != nil {
		desc.Priority = number(int64(*u.Priority))
	}
	if u.TimeLimit != nil {
		desc.TimeLimit = minutes(*u.TimeLimit)
	}
	if u.ExcludedNodes != nil {
		excluded := slices.Clone(*u.ExcludedNodes)
		if len(excluded) == 0 {
			// slurmrestd keeps ExcNodeList on an empty list (24.11,
			// measured); a list of one empty name clears it.
			excluded = []string{""}
		}
		desc.ExcludedNodes = &excluded
	}
	return desc
}

// UpdateJob changes a job. Errors for the job itself come in results[].
func (b *Backend) UpdateJob(ctx context.Context, id uint32, u model.JobUpdate) error {
	op := fmt.Sprintf("update job %d", id)
	ep := b.endpoint(http.MethodPost, pathJob)
	r, err := b.call(ctx, request{op: op, method: http.MethodPost, path: pathJob, args: []string{jobArg(id)}, body: updateDesc(u)})
	if err != nil {
		return err
	}
	var resp jobPostResp
	if err := decode(op, ep, r, &resp); err != nil {
		return err
	}
	for _, res := range deref(resp.Results) {
		if code := deref(res.ErrorCode); code != 0 {
			errs := []model.SlurmError{{Errno: int(code), Error: deref(res.Error)}}
			return &model.APIError{Op: op, Endpoint: ep, StatusCode: r.status, Errors: errs, Kind: model.Classify(r.status, errs)}
		}
	}
	return nil
}

// CancelJob cancels a job, or sends it signal when one is given. Errors for
// the job come in status[].error with HTTP 200: 2017 is ErrNotFound.
func (b *Backend) CancelJob(ctx context.Context, id uint32, signal string) error {
	op := fmt.Sprintf("cancel job %d", id)
	var q url.Values
	if signal != "" {
		op = fmt.Sprintf("signal job %d with %s", id, signal)
		q = url.Values{"signal": {signal}}
	}
	ep := b.endpoint(http.MethodDelete, pathJob)
	r, err := b.call(ctx, request{op: op, method: http.MethodDelete, path: pathJob, args: []string{jobArg(id)}, query: q})
	if err != nil {
		return err
	}
	var resp killJobResp
	if err := decode(op, ep, r, &resp); err != nil {
		return err
	}
	for _, st := range resp.Status {
		if st.Error == nil || deref(st.Error.Code) == 0 {
			continue
		}
		code := int(deref(st.Error.Code))
		if code == model.ErrnoAlreadyDone {
			return nil // the job ended already: what cancel wanted
		}
		errs := []model.SlurmError{{Errno: code, Error: deref(st.Error.String), Description: deref(st.Error.Message)}}
		return &model.APIError{Op: op, Endpoint: ep, StatusCode: r.status, Errors: errs, Kind: model.Classify(r.status, errs)}
	}
	return nil
}

// DecodeJobs reads a /jobs/ or /job/X answer into model jobs.
func DecodeJobs(body []byte) ([]model.Job, time.Time, error) {
	sink := &jobSink{}
	m, err := decodeStream(bytes.NewReader(body), "jobs", sink.elem)
	if err != nil {
		return nil, time.Time{}, err
	}
	last, err := m.lastUpdate()
	if err != nil {
		return nil, time.Time{}, err
	}
	return sink.jobs, unixTime(&last), nil
}

// toJob is the model job of the i-th job of an answer.
func toJob(j *wireJob, i int) (model.Job, error) {
	if deref(j.JobId) <= 0 || deref(j.JobId) > math.MaxUint32 {
		return model.Job{}, fmt.Errorf("job %d has no id", i)
	}
	job := model.Job{
		ID:          uint32(*j.JobId),
		Name:        deref(j.Name),
		User:        deref(j.UserName),
		Account:     deref(j.Account),
		Partition:   deref(j.Partition),
		QOS:         deref(j.Qos),
		State:       model.JobState(deref(j.JobState)),
		Reason:      deref(j.StateReason),
		Nodes:       deref(j.Nodes),
		Comment:     deref(j.Comment),
		Priority:    u32(j.Priority),
		SubmitTime:  unixTime(j.SubmitTime),
		StartTime:   unixTime(j.StartTime),
		EndTime:     unixTime(j.EndTime),
		PreemptTime: unixTime(j.PreemptTime),
		TimeLimit:   fromMinutes(j.TimeLimit),
		TresPerNode: deref(j.TresPerNode),
	}
	if j.ExitCode != nil {
		job.ExitCode = int32(u32(j.ExitCode.ReturnCode))
	}
	job.GresDetail = gresDetail(j)
	return job, nil
}

// gresDetail pairs gres_detail's entries with the allocated nodes: Slurm
// writes one entry per node of job_resources, in that order.
func gresDetail(j *wireJob) map[string]string {
	if j.GresDetail == nil || j.JobResources == nil || j.JobResources.Nodes == nil || j.JobResources.Nodes.Allocation == nil {
		return nil
	}
	nodes := slices.SortedFunc(slices.Values(*j.JobResources.Nodes.Allocation), func(a, b wireJobResNode) int { return int(a.Index - b.Index) })
	if len(nodes) != len(*j.GresDetail) {
		return nil
	}
	out := make(map[string]string, len(nodes))
	for i, n := range nodes {
		out[n.Name] = (*j.GresDetail)[i]
	}
	return out
}
