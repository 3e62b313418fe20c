package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab"
)

// The scheduler's job cache follows onepool's own jobs by id (issue 38):
// other users' jobs coming and going, and a pod placed, bound and ended
// beside them, cost it no listing of Slurm's jobs at each poll, as they
// did before — at 50,000 queued jobs one listing takes slurmrestd minutes. Read from the scheduler's own
// onepool_slurmrest_requests_total, as a platform team would.
func TestSchedulerFollowsItsJobsWithoutListingSlurms(t *testing.T) {
	if lab.ChartMode() {
		t.Skip("reads the lab's scheduler process's metrics port; the chart's scheduler pod is scraped in TestMetricsOnTheChartVerifiedWithItsCA")
	}
	e := newSchedEnv(t)
	ctx := context.Background()
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", lab.SchedulerPort)
	requests := func(endpoint string) float64 {
		m, err := scrape(t, e.l, url)
		if err != nil {
			t.Fatal(err)
		}
		n := 0.0
		for series, v := range m {
			if strings.HasPrefix(series, "onepool_slurmrest_requests_total{") && strings.Contains(series, fmt.Sprintf("endpoint=%q", endpoint)) {
				n += v
			}
		}
		return n
	}
	lists, states := requests("GET /jobs"), requests("GET /jobs/state")

	// Another user's queue changes: ten held jobs come, then go.
	id := sbatchAs(t, e.l, lab.JailUser, "-H", "--array=0-9", "-J", "foreign", "-o", "/dev/null", "--wrap", "sleep 1")
	t.Cleanup(func() { _, _ = e.l.Slurm(context.Background(), "scancel", id) })
	e.create(e.pod("followed", 1, nil))
	e.waitBound("followed", 30*time.Second)
	job := e.onlyJob("followed")
	e.slurm("scancel", id)
	if err := e.kc.CoreV1().Pods(e.ns).Delete(ctx, "followed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the pod's job ends", func() (bool, string) {
		st := scontrolJob(t, e.l, job.ID)["JobState"]
		return st == "CANCELLED" || st == "COMPLETED", st
	})
	time.Sleep(3 * time.Second) // a few of the cache's polls

	// While its job runs the scheduler reads the job's full record each
	// 500 ms (a preemption shows only there), by id; the cache's polls
	// list nothing, however the queue changes.
	if got := requests("GET /jobs") - lists; got != 0 {
		t.Errorf("the scheduler listed Slurm's jobs %v times while it placed one pod beside another user's changing queue; want none", got)
	}
	if got := requests("GET /jobs/state") - states; got < 3 {
		t.Errorf("the scheduler asked /jobs/state %v times in that time; its jobs are followed by id, at least once a second", got)
	}
}
