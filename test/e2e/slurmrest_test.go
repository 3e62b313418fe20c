package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

func TestNodesWithGRES(t *testing.T) {
	l := lab.Shared(t)
	c := slurmClient(t, l)
	ctx := context.Background()
	list, err := c.ListNodes(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]slurmrest.Node{}
	for _, n := range list.Nodes {
		byName[n.Name] = n
	}
	for _, name := range l.NodeNames() {
		n, ok := byName[name]
		if !ok {
			t.Fatalf("node %s missing from /nodes (got %d nodes)", name, len(list.Nodes))
		}
		if n.Gres != "gpu:h100:8" {
			t.Errorf("node %s: GRES %q, want gpu:h100:8", name, n.Gres)
		}
		if !slices.Contains(n.Partitions, lab.Partition) {
			t.Errorf("node %s: partitions %v, want %s among them", name, n.Partitions, lab.Partition)
		}
		if n.CPUs != lab.NodeCPUs {
			t.Errorf("node %s: %d CPUs, want %d", name, n.CPUs, lab.NodeCPUs)
		}
		// What an admin sees with scontrol must agree.
		if got := scontrolNode(t, l, name)["Gres"]; got != n.Gres {
			t.Errorf("node %s: scontrol says Gres=%s, slurmrest says %s", name, got, n.Gres)
		}
	}
	if list.LastUpdate.IsZero() {
		t.Error("node listing has no update time")
	}
	one, err := c.GetNode(ctx, l.NodeNames()[0])
	if err != nil || one.Name != l.NodeNames()[0] {
		t.Fatalf("GetNode: %+v, %v", one, err)
	}
	if _, err := c.GetNode(ctx, "no-such-node"); !errors.Is(err, slurmrest.ErrNotFound) {
		t.Errorf("GetNode(no-such-node) = %v, want ErrNotFound", err)
	}
	parts, err := c.ListPartitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(parts, func(p slurmrest.Partition) bool { return p.Name == lab.Partition && p.TotalNodes == len(l.NodeNames()) }) {
		t.Errorf("partitions %+v: want %s with %d nodes", parts, lab.Partition, len(l.NodeNames()))
	}
}

func TestSubmitRunCancel(t *testing.T) {
	l := lab.Shared(t)
	c := slurmClient(t, l)
	ctx := context.Background()
	name := uniqueName("e2e-run")
	id, err := c.SubmitJob(ctx, sleepJob(name, 8))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CancelJob(context.Background(), id) })
	var job *slurmrest.Job
	eventually(t, 60*time.Second, "job RUNNING", func() (bool, string) {
		job, err = c.GetJob(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return job.State.Base() == slurmrest.JobRunning && job.Nodes != "", strings.Join(job.State, ",") + " " + job.Reason
	})
	if job.Name != name || job.Partition != lab.Partition {
		t.Errorf("job %d: name %q partition %q, want %q %q", id, job.Name, job.Partition, name, lab.Partition)
	}
	if !slices.Contains(l.NodeNames(), job.Nodes) {
		t.Errorf("job %d runs on %q, want one GPU node", id, job.Nodes)
	}
	sc := scontrolJob(t, l, id)
	if sc["JobState"] != "RUNNING" || sc["NodeList"] != job.Nodes {
		t.Errorf("scontrol: JobState=%s NodeList=%s; slurmrest: RUNNING on %s", sc["JobState"], sc["NodeList"], job.Nodes)
	}
	states, err := c.JobStates(ctx, []uint32{id, 999999})
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].ID != id || states[0].State.Base() != slurmrest.JobRunning {
		t.Errorf("JobStates = %+v, want only job %d RUNNING", states, id)
	}
	comment := "changed by e2e"
	if err := c.UpdateJob(ctx, id, slurmrest.JobUpdate{Comment: &comment}); err != nil {
		t.Fatal(err)
	}
	if got := scontrolJob(t, l, id)["Comment"]; got != comment {
		t.Errorf("after UpdateJob, scontrol Comment=%q, want %q", got, comment)
	}
	if err := c.CancelJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "job CANCELLED", func() (bool, string) {
		job, err = c.GetJob(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return job.State.Base() == slurmrest.JobCancelled, strings.Join(job.State, ",")
	})
	if _, err := c.GetJob(ctx, 4000000000); !errors.Is(err, slurmrest.ErrNotFound) {
		t.Errorf("GetJob(unknown) = %v, want ErrNotFound", err)
	}
}

// An array job's records in /jobs/state/: Slurm names them "<job>_<task>"
// and "<job>_[<tasks>]" there (26.05.5; ids of their own in /jobs/).
// The light listing must still read (the job cache compares it with its
// view instead of listing every job), naming each record by its job id.
func TestJobStatesNameArrays(t *testing.T) {
	l := lab.Shared(t)
	c := slurmClient(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := l.Slurm(ctx, "sbatch", "--parsable", "-H", "--array=0-3", "-J", uniqueName("e2e-array"), "-o", "/dev/null", "--wrap", "true")
	if err != nil {
		t.Fatalf("sbatch --array: %v: %s", err, out)
	}
	array := strings.TrimSpace(string(out))
	t.Cleanup(func() { _, _ = l.Slurm(context.Background(), "scancel", array) })
	// Changing one pending task gives it a record (and a job id) of its own.
	if out, err := l.Slurm(ctx, "scontrol", "update", "JobId="+array+"_1", "Comment=split"); err != nil {
		t.Fatalf("scontrol update %s_1: %v: %s", array, err, out)
	}
	show, err := l.Slurm(ctx, "scontrol", "show", "job", "-o", array+"_1")
	if err != nil {
		t.Fatalf("scontrol show job %s_1: %v", array, err)
	}
	kv := parseKV(strings.SplitN(string(show), "\n", 2)[0])
	task, err := strconv.ParseUint(kv["JobId"], 10, 32)
	if err != nil || kv["ArrayJobId"] != array || kv["ArrayTaskId"] != "1" {
		t.Fatalf("scontrol show job %s_1: JobId=%s ArrayJobId=%s ArrayTaskId=%s", array, kv["JobId"], kv["ArrayJobId"], kv["ArrayTaskId"])
	}
	meta, err := strconv.ParseUint(array, 10, 32)
	if err != nil {
		t.Fatalf("sbatch --parsable said %q", array)
	}
	states, err := c.AllJobStates(ctx)
	if err != nil {
		t.Fatalf("AllJobStates with an array queued: %v", err)
	}
	got := map[uint32]string{}
	for _, s := range states {
		got[s.ID] = s.State.Base()
	}
	for _, id := range []uint32{uint32(meta), uint32(task)} {
		if got[id] != slurmrest.JobPending {
			t.Errorf("AllJobStates: job %d is %q, want PENDING (array %s; %d entries)", id, got[id], array, len(states))
		}
	}
	one, err := c.JobStates(ctx, []uint32{uint32(task)})
	if err != nil || len(one) != 1 || one[0].ID != uint32(task) {
		t.Errorf("JobStates(%d) = %+v, %v; want that task alone", task, one, err)
	}
}

func TestDrainResume(t *testing.T) {
	l := lab.Shared(t)
	c := slurmClient(t, l)
	ctx := context.Background()
	node := l.NodeNames()[len(l.NodeNames())-1]
	t.Cleanup(func() { resumeIfDrained(t, l, node) })
	reason := "e2e drain " + uniqueName("r")
	if err := c.Drain(ctx, node, reason); err != nil {
		t.Fatal(err)
	}
	sc := scontrolNode(t, l, node)
	if !strings.Contains(sc["State"], "DRAIN") || !strings.HasPrefix(sc["Reason"], reason) {
		t.Fatalf("after Drain: scontrol State=%s Reason=%s", sc["State"], sc["Reason"])
	}
	n, err := c.GetNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if !n.State.Drain() || n.Reason != reason {
		t.Errorf("GetNode after drain: state %v reason %q", n.State, n.Reason)
	}
	if err := c.Resume(ctx, node); err != nil {
		t.Fatal(err)
	}
	if st := scontrolNode(t, l, node)["State"]; strings.Contains(st, "DRAIN") {
		t.Fatalf("after Resume: scontrol State=%s", st)
	}
	// Slurm refuses the second resume (24.11: 2028, HTTP 500; 26.05: 2180,
	// HTTP 422, as the replay tests' recordings show); the node reads back
	// resumed, so it is done.
	if err := c.Resume(ctx, node); err != nil {
		t.Errorf("second Resume of a node that is not drained = %v, want nil", err)
	}
	if err := c.Drain(ctx, "no-such-node", "x"); !errors.Is(err, slurmrest.ErrNotFound) {
		t.Errorf("Drain(no-such-node) = %v, want ErrNotFound", err)
	}
	if err := c.Drain(ctx, node, ""); err == nil {
		t.Error("Drain without a reason succeeded")
	}
}

func TestTokens(t *testing.T) {
	l := lab.Shared(t)
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	c, err := slurmrest.New(slurmrest.Config{URL: l.RESTURL(), TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListNodes(ctx, time.Time{}); !errors.Is(err, slurmrest.ErrNoToken) {
		t.Errorf("no token file: %v, want ErrNoToken", err)
	}
	expired, err := l.MintToken(ctx, "slurm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	writeToken(t, file, expired)
	time.Sleep(2500 * time.Millisecond)
	_, err = c.ListNodes(ctx, time.Time{})
	var apiErr *slurmrest.APIError
	if !errors.Is(err, slurmrest.ErrUnauthenticated) || !errors.As(err, &apiErr) {
		t.Fatalf("expired token: %v, want ErrUnauthenticated", err)
	}
	if apiErr.StatusCode != 401 && apiErr.StatusCode != 511 {
		t.Errorf("expired token: HTTP %d, want 401 or 511", apiErr.StatusCode)
	}
	if strings.Contains(err.Error(), expired) || strings.Contains(err.Error(), expired[len(expired)-16:]) {
		t.Error("the error message holds the token")
	}
	writeToken(t, file, "garbage")
	if _, err := c.ListNodes(ctx, time.Time{}); !errors.Is(err, slurmrest.ErrUnauthenticated) {
		t.Errorf("garbage token: %v, want ErrUnauthenticated", err)
	}
	// Rotation: a good token written into the same file is used at once.
	good, err := l.MintToken(ctx, "slurm", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeToken(t, file, good)
	if _, err := c.ListNodes(ctx, time.Time{}); err != nil {
		t.Errorf("after rotation to a valid token: %v", err)
	}
}

func writeToken(t *testing.T, file, tok string) {
	t.Helper()
	if err := os.WriteFile(file+".tmp", []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
}

// recorder collects the cache's events for assertions.
type recorder struct {
	mu      sync.Mutex
	updates []slurmrest.Node
	deletes []string
	status  []bool
}

func (r *recorder) handler() slurmrest.NodeHandler {
	return slurmrest.NodeHandler{
		Update: func(_, n *slurmrest.Node) { r.mu.Lock(); r.updates = append(r.updates, *n); r.mu.Unlock() },
		Delete: func(n *slurmrest.Node) { r.mu.Lock(); r.deletes = append(r.deletes, n.Name); r.mu.Unlock() },
	}
}

func (r *recorder) statusFunc(stale bool) {
	r.mu.Lock()
	r.status = append(r.status, stale)
	r.mu.Unlock()
}

func (r *recorder) snapshot() ([]slurmrest.Node, []string, []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.updates), slices.Clone(r.deletes), slices.Clone(r.status)
}

func startCache(t *testing.T, l *lab.Lab, cfg slurmrest.CacheConfig) (*slurmrest.Cache, *recorder) {
	t.Helper()
	return startCacheOn(t, slurmClient(t, l), cfg)
}

// startCacheOn runs a cache over c until the test ends, its events
// recorded, and waits for its first sync.
func startCacheOn(t *testing.T, c *slurmrest.Client, cfg slurmrest.CacheConfig) (*slurmrest.Cache, *recorder) {
	t.Helper()
	cache := slurmrest.NewCache(c, cfg)
	rec := &recorder{}
	cache.AddNodeHandler(rec.handler())
	cache.AddStatusHandler(rec.statusFunc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := cache.WaitSynced(wctx); err != nil {
		t.Fatal(err)
	}
	return cache, rec
}

// The same whether the cache asks the node table each poll or reads the
// node by name (issue 38's follow mode).
func TestCacheStaleWhileSlurmrestdDown(t *testing.T) {
	for name, mode := range map[string]slurmrest.NodeFollow{"table": slurmrest.NodeFollowNever, "by name": slurmrest.NodeFollowAlways} {
		t.Run(name, func(t *testing.T) { cacheStaleWhileSlurmrestdDown(t, mode) })
	}
}

func cacheStaleWhileSlurmrestdDown(t *testing.T, mode slurmrest.NodeFollow) {
	l := lab.Shared(t)
	node := l.NodeNames()[len(l.NodeNames())-1]
	t.Cleanup(func() { resumeIfDrained(t, l, node) })
	cache, rec := startCache(t, l, slurmrest.CacheConfig{PollInterval: 200 * time.Millisecond, StaleAfter: 3 * time.Second, NodeFollow: mode})
	if _, err := cache.Node(node); err != nil {
		t.Fatalf("fresh cache: Node(%s) = %v", node, err)
	}
	if err := l.StopSlurmrestd(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = l.StartSlurmrestd(context.Background())
		}
	})

	// A call to a stopped slurmrestd fails fast with the typed error.
	c := slurmClient(t, l)
	start := time.Now()
	_, err := c.ListNodes(context.Background(), time.Time{})
	if !errors.Is(err, slurmrest.ErrUnreachable) {
		t.Fatalf("slurmrestd down: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 11*time.Second {
		t.Errorf("unreachable error took %s, beyond the 10 s deadline", d)
	}

	eventually(t, 15*time.Second, "cache stale", func() (bool, string) { return cache.Stale(), "fresh" })
	if _, err := cache.Node(node); !errors.Is(err, slurmrest.ErrStale) {
		t.Errorf("stale cache: Node(%s) = %v, want ErrStale (unknown, not old data)", node, err)
	}
	if _, err := cache.Nodes(); !errors.Is(err, slurmrest.ErrStale) {
		t.Errorf("stale cache: Nodes() = %v, want ErrStale", err)
	}

	// A change made while slurmrestd is down arrives once it is back.
	reason := "e2e while down " + uniqueName("r")
	if _, err := l.Slurm(context.Background(), "scontrol", "update", "nodename="+node, "state=drain", "reason="+reason); err != nil {
		t.Fatal(err)
	}
	if err := l.StartSlurmrestd(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, 20*time.Second, "cache fresh again", func() (bool, string) { return !cache.Stale(), "stale" })
	eventually(t, 10*time.Second, "drain event", func() (bool, string) {
		ups, _, _ := rec.snapshot()
		return slices.ContainsFunc(ups, func(n slurmrest.Node) bool { return n.Name == node && n.State.Drain() && n.Reason == reason }), "none"
	})
	_, deletes, status := rec.snapshot()
	if len(deletes) != 0 {
		t.Errorf("delete events for %v while slurmrestd was down", deletes)
	}
	if !slices.Equal(status, []bool{true, false}) {
		t.Errorf("status events %v, want [stale fresh]", status)
	}
	n, err := cache.Node(node)
	if err != nil || !n.State.Drain() {
		t.Errorf("fresh cache: Node(%s) = %v %v, want drained", node, n.State, err)
	}
}

func TestCacheSlurmctldRestartNoSpuriousDelete(t *testing.T) {
	l := lab.Shared(t)
	ctx := context.Background()
	cache, rec := startCache(t, l, slurmrest.CacheConfig{PollInterval: 200 * time.Millisecond, StaleAfter: 30 * time.Second})
	c := slurmClient(t, l)
	id, err := c.SubmitJob(ctx, sleepJob(uniqueName("e2e-restart"), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CancelJob(context.Background(), id) })
	eventually(t, 30*time.Second, "job in cache", func() (bool, string) {
		_, err := cache.Job(id)
		return err == nil, "absent"
	})
	if err := l.RestartSlurmctld(ctx); err != nil {
		t.Fatal(err)
	}
	// Let the cache poll through the restart and for a while after it.
	time.Sleep(5 * time.Second)
	eventually(t, 30*time.Second, "cache fresh", func() (bool, string) { return !cache.Stale(), "stale" })
	_, deletes, _ := rec.snapshot()
	if len(deletes) != 0 {
		t.Errorf("node delete events after a slurmctld restart: %v", deletes)
	}
	nodes, err := cache.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range l.NodeNames() {
		if !slices.ContainsFunc(nodes, func(n slurmrest.Node) bool { return n.Name == name }) {
			t.Errorf("node %s gone from the cache after the restart", name)
		}
	}
	if _, err := cache.Job(id); err != nil {
		t.Errorf("job %d after the restart: %v", id, err)
	}
	// Per-object reads: a cached job, and one only slurmrestd knows.
	if j, err := cache.GetJob(ctx, id); err != nil || j.ID != id {
		t.Errorf("GetJob(%d) = %+v, %v", id, j, err)
	}
	if _, err := cache.GetNode(ctx, "no-such-node"); !errors.Is(err, slurmrest.ErrNotFound) {
		t.Errorf("GetNode(no-such-node) = %v, want ErrNotFound", err)
	}
}
