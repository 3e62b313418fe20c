package nodeset

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

func TestCollectorExportsStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	gpu := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "slurm", Name: "gpu"}, Status: v1alpha1.NodeSetStatus{
		DesiredNodes: 4, Pods: 4, ReadyPods: 3, UpdatedPods: 2,
		Slurm: v1alpha1.SlurmCounts{Idle: 1, Allocated: 1, Drained: 1, Missing: 1, Known: true},
	}}
	cpu := &v1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "slurm", Name: "cpu"}, Status: v1alpha1.NodeSetStatus{
		DesiredNodes: 1, Slurm: v1alpha1.SlurmCounts{Down: 1}, // Slurm unknown: the last counts
	}}
	c := NewCollector(fake.NewClientBuilder().WithScheme(scheme).WithObjects(gpu, cpu).Build())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	want := `# HELP onepool_nodeset_slurm_known 1 when the NodeSet's Slurm counts are current; 0 while Slurm's state is unknown (the counts are then the last known).
# TYPE onepool_nodeset_slurm_known gauge
onepool_nodeset_slurm_known{namespace="slurm",nodeset="cpu"} 0
onepool_nodeset_slurm_known{namespace="slurm",nodeset="gpu"} 1
# HELP onepool_nodeset_slurm_nodes A NodeSet's nodes by Slurm state: idle, allocated, drained, down, missing (not registered in Slurm).
# TYPE onepool_nodeset_slurm_nodes gauge
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="cpu",slurm_state="allocated"} 0
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="cpu",slurm_state="down"} 1
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="cpu",slurm_state="drained"} 0
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="cpu",slurm_state="idle"} 0
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="cpu",slurm_state="missing"} 0
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="gpu",slurm_state="allocated"} 1
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="gpu",slurm_state="down"} 0
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="gpu",slurm_state="drained"} 1
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="gpu",slurm_state="idle"} 1
onepool_nodeset_slurm_nodes{namespace="slurm",nodeset="gpu",slurm_state="missing"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "onepool_nodeset_slurm_known", "onepool_nodeset_slurm_nodes"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP onepool_nodeset_members A NodeSet's members by state: desired (selected Nodes), pods, ready, updated (pods of the current template).
# TYPE onepool_nodeset_members gauge
onepool_nodeset_members{namespace="slurm",nodeset="cpu",state="desired"} 1
onepool_nodeset_members{namespace="slurm",nodeset="cpu",state="pods"} 0
onepool_nodeset_members{namespace="slurm",nodeset="cpu",state="ready"} 0
onepool_nodeset_members{namespace="slurm",nodeset="cpu",state="updated"} 0
onepool_nodeset_members{namespace="slurm",nodeset="gpu",state="desired"} 4
onepool_nodeset_members{namespace="slurm",nodeset="gpu",state="pods"} 4
onepool_nodeset_members{namespace="slurm",nodeset="gpu",state="ready"} 3
onepool_nodeset_members{namespace="slurm",nodeset="gpu",state="updated"} 2
`), "onepool_nodeset_members"))
}

func TestCollectorListErrorFailsTheScrape(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	broken := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not synced")
		},
	}).Build()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(NewCollector(broken)))
	_, err := reg.Gather()
	require.ErrorContains(t, err, "cache not synced")
}
