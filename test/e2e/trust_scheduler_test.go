package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// A plain Slurm user who learns a pod's uid (its namespace's users can
// read it; squeue shows earlier placeholders' comments) submits a job of
// their own, with onepool's comment naming that pod, before onepool
// submits the pod's. onepool used to adopt any job with its comment: the
// pod was bound into the user's allocation, on GPUs Slurm gave the user.
// Now the job is not onepool's: the pod gets a placeholder of its own, and
// the user's job is left alone (not adopted, not cancelled).
func TestTrustAPlainUsersJobWithOnepoolsCommentIsNotAPlaceholder(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	gate := corev1.PodSchedulingGate{Name: "e2e.onepool.dev/hold"}
	p := e.pod("victim", 1, nil)
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{gate}
	p = e.create(p)

	forged := fmt.Sprintf("%spod=%s/%s;uid=%s", keys.PlaceholderCommentPrefix, e.ns, p.Name, p.UID)
	id := sbatchAs(t, e.l, lab.JailUser, "--gres=gpu:1", "--comment", forged, "-J", "forged", "-o", "/dev/null", "--wrap", "sleep 600")
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", id) })
	var forgedNode string
	eventually(t, 30*time.Second, "the user's job "+id+" runs", func() (bool, string) {
		j := scontrolJob(t, e.l, mustID(t, id))
		forgedNode = j["NodeList"]
		return j["JobState"] == "RUNNING", j["JobState"]
	})

	// The gate goes: the scheduler now places the pod.
	p, err := e.get(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.SchedulingGates = nil
	if _, err := e.kc.CoreV1().Pods(e.ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := e.waitBound(p.Name, 60*time.Second)
	p = e.withJobID(p.Name)
	own := p.Annotations[keys.AnnotationJobID]
	if own == id {
		t.Fatalf("the pod was bound into the user's job %s on %s (onepool took a job it did not submit)", id, forgedNode)
	}
	j := scontrolJob(t, e.l, mustID(t, own))
	if j["JobState"] != "RUNNING" || j["NodeList"] != node || !strings.Contains(j["UserId"], "slurm(") {
		t.Errorf("the pod's job %s: state %s on %s as %s; want RUNNING on %s as onepool's Slurm user", own, j["JobState"], j["NodeList"], j["UserId"], node)
	}
	if !strings.Contains(j["Comment"], ";sig=") {
		t.Errorf("the pod's job %s carries no signature: %q", own, j["Comment"])
	}
	holds(t, 3*time.Second, "the user's job "+id+" is left alone", func() (bool, string) {
		u := scontrolJob(t, e.l, mustID(t, id))
		return u["JobState"] == "RUNNING" && strings.Contains(u["UserId"], lab.JailUser+"("), u["JobState"] + " " + u["UserId"]
	})
}

// A Slurm user may set any comment on a job of their own. A plain user
// copies a running placeholder's comment onto an older job of theirs:
// onepool used to keep the older of two jobs naming one pod, so it
// cancelled its own placeholder (the pod was evicted) and took the
// user's job for the pod. The comment is signed with the Slurm user the
// job runs as: the copy is nobody's placeholder, and nothing happens.
func TestTrustACopiedPlaceholderCommentTakesNothing(t *testing.T) {
	e := newSchedEnv(t)
	older := sbatchAs(t, e.l, lab.JailUser, "--gres=gpu:1", "-J", "older", "-o", "/dev/null", "--wrap", "sleep 600")
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", older) })
	e.create(e.pod("victim", 1, nil))
	node := e.waitBound("victim", 60*time.Second)
	p := e.withJobID("victim")
	own := p.Annotations[keys.AnnotationJobID]
	comment := scontrolJob(t, e.l, mustID(t, own))["Comment"]
	if !strings.Contains(comment, ";sig=") {
		t.Fatalf("the placeholder's comment %q is not signed", comment)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if out, err := e.l.Slurm(ctx, "runuser", "-u", lab.JailUser, "--", "scontrol", "update", "jobid="+older, "comment="+comment); err != nil {
		t.Fatalf("%s copies the comment onto job %s: %v %s", lab.JailUser, older, err, out)
	}
	if got := scontrolJob(t, e.l, mustID(t, older))["Comment"]; got != comment {
		t.Fatalf("the copy did not take: %q", got)
	}
	// The scheduler lists Slurm's jobs in full every 10 s: room for it to
	// act on the copy.
	holds(t, 25*time.Second, "the placeholder, its pod and the user's job are left as they were", func() (bool, string) {
		j := scontrolJob(t, e.l, mustID(t, own))
		u := scontrolJob(t, e.l, mustID(t, older))
		p, err := e.get("victim")
		if err != nil {
			return false, err.Error()
		}
		ok := j["JobState"] == "RUNNING" && u["JobState"] == "RUNNING" && p.DeletionTimestamp == nil && p.Spec.NodeName == node &&
			p.Annotations[keys.AnnotationJobID] == own
		return ok, fmt.Sprintf("placeholder %s %s, user's job %s %s, pod on %s deleting=%v job-id=%s", own, j["JobState"], older, u["JobState"],
			p.Spec.NodeName, p.DeletionTimestamp != nil, p.Annotations[keys.AnnotationJobID])
	})
}

// A pod's author can write the job id annotation. A tenant who creates a
// pod bound to a node (spec.nodeName) that names another team's job used
// to take over onepool's record of that job: once the tenant's pod went,
// the release endpoint answered "gone" for the victim's job while the
// victim's pod still ran on its GPUs (a placeholder's script, or the
// release epilog, would then let Slurm give those GPUs to another job).
func TestTrustAJobIDAnnotationTakesNoOnesJob(t *testing.T) {
	e := newSchedEnv(t)
	ctx := context.Background()
	e.create(e.pod("victim", 1, nil))
	node := e.waitBound("victim", 60*time.Second)
	victim := e.withJobID("victim")
	jobID := victim.Annotations[keys.AnnotationJobID]

	tenant := newSchedEnv(t) // another team's namespace, and its own user
	tc := asTenant(t, e.l, tenant.ns, "tenant-b")
	thief := tenant.pod("thief", 0, map[string]string{keys.AnnotationJobID: jobID})
	thief.Spec.NodeName = node
	if _, err := tc.CoreV1().Pods(tenant.ns).Create(ctx, thief, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant creates a pod in its own namespace: %v", err)
	}
	// The scheduler's resync (every 30 s) reads recorded job ids; the
	// victim's job must stay the victim's throughout.
	holds(t, 35*time.Second, "the release endpoint says the victim's pod is present", func() (bool, string) {
		code, body := releaseAnswer(t, jobID)
		return code == http.StatusConflict, fmt.Sprintf("%d %s", code, body)
	})
	zero := int64(0)
	if err := tc.CoreV1().Pods(tenant.ns).Delete(ctx, "thief", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	tenant.waitGone("thief", 30*time.Second)
	holds(t, 5*time.Second, "after the thief's pod went, the victim's job is still held for it", func() (bool, string) {
		code, body := releaseAnswer(t, jobID)
		return code == http.StatusConflict, fmt.Sprintf("%d %s", code, body)
	})
	if p, err := e.get("victim"); err != nil || p.DeletionTimestamp != nil || p.Spec.NodeName != node {
		t.Fatalf("the victim's pod: %v %+v", err, p)
	}
	if j := scontrolJob(t, e.l, mustID(t, jobID)); j["JobState"] != "RUNNING" {
		t.Errorf("the victim's job %s is %s", jobID, j["JobState"])
	}
}

// sbatchAs submits a batch job as a plain Slurm user (not root, not
// onepool's) and returns its id.
func sbatchAs(t *testing.T, l *lab.Lab, user string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	argv := append([]string{"runuser", "-u", user, "--", "sbatch"}, args...)
	out, err := l.Slurm(ctx, argv...)
	m := jobIDRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		t.Fatalf("sbatch as %s: %v %s", user, err, out)
	}
	return m[1]
}

func mustID(t *testing.T, s string) uint32 {
	t.Helper()
	var id uint32
	if _, err := fmt.Sscan(s, &id); err != nil || id == 0 {
		t.Fatalf("job id %q: %v", s, err)
	}
	return id
}

// releaseAnswer asks the release endpoint about a job, as a placeholder
// script on a Slurm node does.
func releaseAnswer(t *testing.T, jobID string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s%s", lab.ReleasePort, keys.ReleasePath, jobID))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b))
}
