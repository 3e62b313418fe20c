package scheduler

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/onepool/onepool/internal/poolview"
	"github.com/onepool/onepool/slurmrest"
)

// descGPUHeld is the per-GPU ownership series: one per GPU in use, so its
// cardinality is bounded by the pool's GPUs (a free GPU has none).
var descGPUHeld = prometheus.NewDesc("onepool_gpu_held",
	"1 for each GPU a live onepool placeholder job holds, by Slurm node, GRES index and holder: pod (the job holds a bound pod's place) or slurm_job (no pod carries the job's id). Other users' jobs are not followed, so not counted. A free GPU has no series. Served by the leader (the replica whose Slurm cache is current).",
	[]string{"slurm_node", "gres_index", "holder"}, nil)

// gpuCollector reads the job cache and the pod informer at each scrape.
type gpuCollector struct {
	jobs func() ([]slurmrest.Job, error)
	pods corelisters.PodLister
}

// Describe implements prometheus.Collector.
func (c gpuCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descGPUHeld }

// Collect implements prometheus.Collector. A stale or stopped cache (a
// standby replica's) gives no series rather than a failed scrape: what
// the GPUs hold is then the leader's to say.
func (c gpuCollector) Collect(ch chan<- prometheus.Metric) {
	jobs, err := c.jobs()
	if err != nil {
		return
	}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, m := range gpuHeldMetrics(jobs, pods) {
		ch <- m
	}
}

// gpuHeldMetrics are the series of the GPUs these jobs hold.
func gpuHeldMetrics(jobs []slurmrest.Job, pods []*corev1.Pod) []prometheus.Metric {
	ps := make([]corev1.Pod, 0, len(pods))
	for _, p := range pods {
		ps = append(ps, *p)
	}
	var out []prometheus.Metric
	for _, h := range poolview.Holdings(jobs, ps) {
		holder := "slurm_job"
		if h.Pod {
			holder = "pod"
		}
		out = append(out, prometheus.MustNewConstMetric(descGPUHeld, prometheus.GaugeValue, 1, h.SlurmNode, strconv.Itoa(h.Index), holder))
	}
	return out
}

// registerCollector adds c to reg; a second profile of the plugin keeps
// the first one's.
func registerCollector(reg prometheus.Registerer, c prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if !errors.As(err, &dup) {
			return err
		}
	}
	return nil
}
