package nodeset

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// The NodeSet series, read from the NodeSets' status at each scrape (as
// kube-state-metrics reads a DaemonSet's): what `kubectl get nodesets`
// shows, over time.
var (
	descMembers = prometheus.NewDesc("onepool_nodeset_members",
		"A NodeSet's members by state: desired (selected Nodes), pods, ready, updated (pods of the current template).",
		[]string{"namespace", "nodeset", "state"}, nil)
	descSlurm = prometheus.NewDesc("onepool_nodeset_slurm_nodes",
		"A NodeSet's nodes by Slurm state: idle, allocated, drained, down, missing (not registered in Slurm).",
		[]string{"namespace", "nodeset", "slurm_state"}, nil)
	descKnown = prometheus.NewDesc("onepool_nodeset_slurm_known",
		"1 when the NodeSet's Slurm counts are current; 0 while Slurm's state is unknown (the counts are then the last known).",
		[]string{"namespace", "nodeset"}, nil)
)

// collectTimeout bounds a scrape's read of the NodeSets (from the
// manager's cache: normally microseconds).
const collectTimeout = 5 * time.Second

// Collector exports every NodeSet's status as metrics.
type Collector struct{ reader client.Reader }

// NewCollector reads NodeSets through reader (the manager's cache).
func NewCollector(reader client.Reader) *Collector { return &Collector{reader: reader} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMembers
	ch <- descSlurm
	ch <- descKnown
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	var list v1alpha1.NodeSetList
	if err := c.reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(descMembers, err)
		return
	}
	for _, m := range statusMetrics(list.Items) {
		ch <- m
	}
}

// statusMetrics are the series of these NodeSets' status.
func statusMetrics(sets []v1alpha1.NodeSet) []prometheus.Metric {
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v int32, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...))
	}
	for _, ns := range sets {
		st, n, name := ns.Status, ns.Namespace, ns.Name
		gauge(descMembers, st.DesiredNodes, n, name, "desired")
		gauge(descMembers, st.Pods, n, name, "pods")
		gauge(descMembers, st.ReadyPods, n, name, "ready")
		gauge(descMembers, st.UpdatedPods, n, name, "updated")
		gauge(descSlurm, st.Slurm.Idle, n, name, "idle")
		gauge(descSlurm, st.Slurm.Allocated, n, name, "allocated")
		gauge(descSlurm, st.Slurm.Drained, n, name, "drained")
		gauge(descSlurm, st.Slurm.Down, n, name, "down")
		gauge(descSlurm, st.Slurm.Missing, n, name, "missing")
		known := int32(0)
		if st.Slurm.Known {
			known = 1
		}
		gauge(descKnown, known, n, name)
	}
	return out
}
