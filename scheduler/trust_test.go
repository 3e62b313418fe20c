package scheduler

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// A Slurm user who reads a pod's uid (kubectl get pod -o yaml, or the
// comment of an earlier placeholder in squeue) submits a job of their own
// with a comment of onepool's form naming that pod, before onepool does.
// Onepool used to take the older of two jobs with its comment: it kept the
// attacker's job, cancelled its own and bound the pod into the attacker's
// allocation. A job whose comment onepool did not sign is nobody's
// placeholder: ignored, never adopted, never the reason to cancel.
func TestCoreIgnoresAJobWithAForgedComment(t *testing.T) {
	other, err := newCommentKeys([]byte("a Slurm user's own key, 32 bytes.."))
	require.NoError(t, err)
	for name, forge := range map[string]func(pod *corev1.Pod) string{
		"the form without a signature": func(pod *corev1.Pod) string { return "onepool:pod=ns/p;uid=" + string(pod.UID) },
		"signed with another key":      func(pod *corev1.Pod) string { return other.comment(ownerOf(pod), "") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newCoreFixture(t)
			f.core.book.observe(slurmrest.Job{ID: 5, Comment: forge(f.pod), State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-1"})
			assert.Empty(t, f.core.Place(f.pod).Node, "the pod is never bound into the attacker's allocation")

			f.core.book.observe(f.job(9, slurmrest.JobRunning, "gpu-1")) // onepool's own
			_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
			require.NoError(t, err)
			assert.Empty(t, f.slurm.cancelled, "nothing is cancelled: the forged job is not onepool's, its own is kept")
			assert.Equal(t, uint32(9), f.core.rec.s.places[ownerOf(f.pod).key()].jobID)
			assert.Equal(t, "gpu-1", f.core.Place(f.pod).Node)
		})
	}
}

// The job id annotation is the pod's own word: its author can write it. A
// tenant who writes another pod's job id on a pod of their own (bound,
// so that onepool would adopt it as an orphan's record) used to take over
// onepool's index of that job: the release endpoint then answered "gone"
// for the victim's job, whose GPUs the victim still used.
func TestCoreNeverTakesAJobIDFromAPodsAnnotation(t *testing.T) {
	f := newCoreFixture(t)
	victimJob := f.job(7, slurmrest.JobRunning, "gpu-1")
	f.jobs.listed = map[uint32]slurmrest.Job{7: victimJob}
	f.core.book.observe(victimJob)

	thief := podWith(map[string]string{keys.AnnotationJobID: "7"}, 1, "", "")
	thief.Name, thief.Namespace, thief.UID = "thief", "tenant", types.UID("u-thief")
	thief.Spec.SchedulerName, thief.Spec.NodeName = "onepool", "gpu-1"
	f.core.podChanged(nil, thief)
	f.core.book.requeueAll()

	assert.Equal(t, ownerOf(f.pod).key(), f.core.rec.s.byJob[7], "job 7 stays the victim's")
	assert.Nil(t, f.core.rec.s.places[ownerOf(thief).key()], "the thief's pod gets no placement for job 7")
	a := f.core.rel.answer(context.Background(), 7)
	assert.Equal(t, http.StatusConflict, a.code, "the release endpoint says the victim's pod is present: %s", a.text)
}

// An annotation naming a job Slurm lists as nobody's placeholder (a plain
// sbatch job) adopts nothing either; one naming a job Slurm does not list
// makes the pod an orphan (its own loss, no one else's).
func TestCoreAdoptsARecordedJobOnlyWhenItCouldBeThePods(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listed *slurmrest.Job
		adopt  bool
	}{
		{"a plain user's job", &slurmrest.Job{ID: 7, Comment: "my training", State: slurmrest.JobState{slurmrest.JobRunning}}, false},
		{"a forged comment", &slurmrest.Job{ID: 7, Comment: "onepool:pod=ns/thief;uid=u-thief", State: slurmrest.JobState{slurmrest.JobRunning}}, false},
		{"not listed (Slurm lost it)", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCoreFixture(t)
			if tc.listed != nil {
				f.jobs.listed = map[uint32]slurmrest.Job{7: *tc.listed}
			}
			thief := podWith(map[string]string{keys.AnnotationJobID: "7"}, 1, "", "")
			thief.Name, thief.UID = "thief", types.UID("u-thief")
			thief.Spec.SchedulerName, thief.Spec.NodeName = "onepool", "gpu-1"
			f.core.podChanged(nil, thief)
			f.core.book.requeueAll()
			p := f.core.rec.s.places[ownerOf(thief).key()]
			assert.Equal(t, tc.adopt, p != nil && p.jobID == 7)
		})
	}
}

// A Slurm user may set any comment on a job of their own (scontrol update
// job comment=): a copy of a live placeholder's signed comment on an
// older job of another user used to make onepool keep that job (the
// older of two) and cancel its own. The comment names the job's Slurm
// user, signed: the copy is not onepool's. And a job onepool made is
// never displaced by an older one claiming the same pod.
func TestCoreACopiedCommentTakesNothing(t *testing.T) {
	f := newCoreFixture(t)
	f.core.sub.ownUser = func() (string, error) { return "slurm", nil }
	require.NoError(t, f.submitOnce(t))
	require.Len(t, f.slurm.submitted, 1)
	signed := f.slurm.submitted[0].Comment
	assert.Contains(t, signed, ";user=slurm;sig=")
	own := slurmrest.Job{ID: 101, Comment: signed, User: "slurm", State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-1"}
	f.core.book.observe(own)

	// alice's older job, with the copied comment.
	f.core.book.observe(slurmrest.Job{ID: 50, Comment: signed, User: "alice", State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-1"})
	_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
	require.NoError(t, err)
	assert.Equal(t, uint32(101), f.core.rec.s.places[ownerOf(f.pod).key()].jobID, "onepool keeps its own job")
	assert.Empty(t, f.slurm.cancelled, "and cancels nothing: alice's job is not onepool's")

	// The same user's older job with the copy: still not the placeholder.
	f.core.book.observe(slurmrest.Job{ID: 60, Comment: signed, User: "slurm", State: slurmrest.JobState{slurmrest.JobRunning}, Nodes: "gpu-1"})
	_, err = f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
	require.NoError(t, err)
	assert.Equal(t, uint32(101), f.core.rec.s.places[ownerOf(f.pod).key()].jobID, "a job onepool made is never displaced by an older copy")
}
