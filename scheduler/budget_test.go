package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/onepool/onepool/slurmrest"
)

// A PodDisruptionBudget refuses the eviction of a pod whose job Slurm is
// preempting: the pod is deleted at once, with the eviction's grace, not
// left running on GPUs Slurm gives away at the end of its GraceTime. A 429
// that is not a budget's (API throttling) is retried instead.
func TestCoreOverridesADisruptionBudgetSlurmHasDecidedAgainst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cause      metav1.CauseType
		wantDelete bool
	}{
		{"budget refuses", policyv1.DisruptionBudgetCause, true},
		{"API throttling", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCoreFixture(t)
			f.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				st := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
				if tc.cause != "" {
					st.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: tc.cause, Message: "The disruption budget infer needs 2 healthy pods and has 2 currently"}}
				}
				return true, nil, st
			})
			j := f.job(7, slurmrest.JobRunning, "gpu-1")
			f.core.book.observe(j)
			j.PreemptTime, j.EndTime = time.Now(), time.Now().Add(30*time.Second)
			f.core.book.observe(j)
			_, err := f.core.life.reconcile(context.Background(), ownerOf(f.pod).key())
			var deleted *int64
			sawDelete := false
			for _, a := range f.kube.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
					sawDelete = true
					deleted = d.GetDeleteOptions().GracePeriodSeconds
				}
			}
			require.Equal(t, tc.wantDelete, sawDelete, "pod deleted")
			if !tc.wantDelete {
				assert.Error(t, err, "a throttled eviction is an error, retried")
				return
			}
			require.NoError(t, err)
			require.NotNil(t, deleted, "the delete carries the eviction's grace")
			assert.LessOrEqual(t, *deleted, int64(30), "grace within Slurm's GraceTime")
			assert.Empty(t, f.slurm.cancelled, "the job is Slurm's to end")
		})
	}
}
