package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/slurmrest"
)

// Helpers of the gang workloads' tests (LeaderWorkerSet, JobSet), whose
// real controllers run in the lab.

func (e *schedEnv) dynamic() dynamic.Interface {
	cfg, err := e.l.RESTConfig()
	if err != nil {
		e.t.Fatal(err)
	}
	return dynamic.NewForConfigOrDie(cfg)
}

// createWorkload creates u (of resource gvr) in the test's namespace and
// returns its uid. At cleanup it is deleted in the foreground and awaited
// gone with what it made (children counts them: StatefulSets, Jobs), so
// the namespace's cleanup does not see its controller make pods again.
func (e *schedEnv) createWorkload(gvr schema.GroupVersionResource, u *unstructured.Unstructured, children func(context.Context) (int, error)) string {
	e.t.Helper()
	r := e.dynamic().Resource(gvr).Namespace(e.ns)
	got, err := r.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx := context.Background()
		fg := metav1.DeletePropagationForeground
		_ = r.Delete(ctx, u.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg})
		eventually(e.t, 60*time.Second, u.GetKind()+" "+u.GetName()+" and what it made gone", func() (bool, string) {
			n, err := children(ctx)
			if err != nil {
				return false, err.Error()
			}
			_, err = r.Get(ctx, u.GetName(), metav1.GetOptions{})
			return n == 0 && err != nil, fmt.Sprintf("%d left, get: %v", n, err)
		})
	})
	return string(got.GetUID())
}

// gangRuns says whether a gang's pods run on its one running job (the
// jobs of activeJobs(job)): size pods, all bound, each on its own node of
// that job.
func (e *schedEnv) gangRuns(pods []corev1.Pod, job string, size int) (bool, string) {
	running, _ := runningBound(pods)
	js := slices.DeleteFunc(e.activeJobs(job), refusedAllocation)
	if len(js) != 1 || js[0].State.Base() != slurmrest.JobRunning {
		return false, fmt.Sprintf("pods %s; active jobs %v", replicaStates(pods), jobIDs(js))
	}
	nodes := expandForTest(e.t, js[0].Nodes)
	seen := map[string]bool{}
	for _, p := range running {
		if !strings.Contains(nodes, p.Spec.NodeName) || seen[p.Spec.NodeName] {
			return false, fmt.Sprintf("%s on %s; job %d on %s", p.Name, p.Spec.NodeName, js[0].ID, js[0].Nodes)
		}
		seen[p.Spec.NodeName] = true
	}
	return len(running) == size && len(pods) == size, fmt.Sprintf("pods %s; job %d on %s", replicaStates(pods), js[0].ID, js[0].Nodes)
}
