package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/slurmrest/model"
)

func TestGPUCollector(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, idx.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "infer-0", UID: types.UID("u0"),
		Annotations: map[string]string{keys.AnnotationJobID: "13"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}))
	jobs := []slurmrest.Job{
		{ID: 12, State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:1)"}},
		{ID: 13, State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:0)"},
			Comment: keys.PlaceholderCommentPrefix + "pod=team-a/infer-0;uid=u0;user=slurm;sig=AAAA"},
	}
	var jobsErr error
	c := gpuCollector{jobs: func() ([]slurmrest.Job, error) { return jobs, jobsErr }, pods: corelisters.NewPodLister(idx)}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, registerCollector(reg, c))
	require.NoError(t, registerCollector(reg, c), "a second profile of the plugin")
	want := `# HELP onepool_gpu_held 1 for each GPU a live onepool placeholder job holds, by Slurm node, GRES index and holder: pod (the job holds a bound pod's place) or slurm_job (no pod carries the job's id). Other users' jobs are not followed, so not counted. A free GPU has no series. Served by the leader (the replica whose Slurm cache is current).
# TYPE onepool_gpu_held gauge
onepool_gpu_held{gres_index="0",holder="pod",slurm_node="gpu-0"} 1
onepool_gpu_held{gres_index="1",holder="slurm_job",slurm_node="gpu-0"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "onepool_gpu_held"))

	jobsErr = errors.New("stale")
	require.Equal(t, 0, testutil.CollectAndCount(c, "onepool_gpu_held"), "a stale cache says nothing")
}
