package nodeset

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
)

func allocatable(cpu, mem string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if cpu != "" {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	return n
}

type podOpt func(*corev1.Pod)

func onNode(name, cpu, mem string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{
		Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}},
	}}}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func onepoolPlaced(p *corev1.Pod)     { p.Spec.SchedulerName = keys.SchedulerName }
func slurmdOf(nodeSet string) podOpt {
	return func(p *corev1.Pod) {
		p.Namespace = "slurm"
		p.Labels = map[string]string{keys.LabelComponent: keys.ComponentSlurmd, keys.LabelNodeSet: nodeSet}
	}
}

func TestSlurmShare(t *testing.T) {
	newSlurmd := onNode("slurmd-new", "500m", "512Mi", slurmdOf("gpu"))
	tests := []struct {
		name    string
		node    *corev1.Node
		pods    []corev1.Pod
		slurmd  *corev1.Pod
		want    share
		wantErr string
	}{
		{"a DaemonSet asks 2 of 8 CPUs: Slurm offers 6", allocatable("8", "32Gi"),
			[]corev1.Pod{onNode("ds", "2", "4Gi")}, nil, share{CPUs: 6, MemoryMB: 28 * 1024}, ""},
		{"slurmd's own request counts; part of a CPU is no CPU", allocatable("8", "32Gi"),
			[]corev1.Pod{onNode("ds", "2", "4Gi")}, &newSlurmd, share{CPUs: 5, MemoryMB: 28*1024 - 512}, ""},
		{"onepool's pods, ended pods, the old slurmd pod and other Nodes' pods are left out", allocatable("8", "32Gi"),
			[]corev1.Pod{
				onNode("ds", "2", "4Gi"),
				onNode("infer", "3", "8Gi", onepoolPlaced),
				onNode("done", "3", "8Gi", phase(corev1.PodSucceeded)),
				onNode("failed", "3", "8Gi", phase(corev1.PodFailed)),
				onNode("slurmd-old", "500m", "512Mi", slurmdOf("gpu")),
				onNode("elsewhere", "3", "8Gi", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }),
			}, &newSlurmd, share{CPUs: 5, MemoryMB: 28*1024 - 512}, ""},
		{"another NodeSet's slurmd pod counts", allocatable("8", "32Gi"),
			[]corev1.Pod{onNode("slurmd-cpu", "2", "4Gi", slurmdOf("cpu"))}, &newSlurmd, share{CPUs: 5, MemoryMB: 28*1024 - 512}, ""},
		{"init containers: the larger of them and the containers", allocatable("8", "32Gi"),
			[]corev1.Pod{func() corev1.Pod {
				p := onNode("init", "1", "1Gi")
				p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
				return p
			}()}, nil, share{CPUs: 5, MemoryMB: 31 * 1024}, ""},
		{"millicores allocatable", allocatable("7910m", "1000Mi"), nil, nil, share{CPUs: 7, MemoryMB: 1000}, ""},
		{"no room for Slurm", allocatable("2", "4Gi"), []corev1.Pod{onNode("ds", "1500m", "1Gi")}, nil, share{},
			"request 1500m of 2 allocatable CPUs"},
		{"no memory left", allocatable("8", "1Gi"), []corev1.Pod{onNode("ds", "1", "1Gi")}, nil, share{}, "nothing is left for Slurm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slurmShare(tc.node, tc.pods, tc.slurmd)
			if tc.wantErr != "" {
				var noRoom *NoRoomError
				require.ErrorAs(t, err, &noRoom)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := slurmShare(allocatable("", ""), nil, nil)
	assert.True(t, errors.Is(err, errNoAllocatable), "a Node without allocatable: %v", err)
}

func TestShareAnnotation(t *testing.T) {
	s := share{CPUs: 6, MemoryMB: 28672}
	got, err := parseShare(s.String())
	require.NoError(t, err)
	assert.Equal(t, s, got)
	for _, bad := range []string{"", "cpus=6", "cpus=6,memory-mb=x", "cpus=0,memory-mb=1", "cpus=6,memory-mb=1,gpus=2", "memory-mb=5"} {
		_, err := parseShare(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.True(t, share{6, 100}.covers(share{6, 100}))
	assert.False(t, share{5, 100}.covers(share{6, 100}))
	assert.False(t, share{6, 99}.covers(share{6, 100}))
}

func TestStaticCountAndWithShare(t *testing.T) {
	env := func(names ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for _, n := range names {
			out = append(out, corev1.EnvVar{Name: n, Value: "16"})
		}
		return out
	}
	pod := func(cs ...corev1.Container) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}} }
	assert.False(t, staticCount(pod(corev1.Container{Name: "slurmd"})))
	assert.True(t, staticCount(pod(corev1.Container{Name: "slurmd", Env: env(keys.EnvSlurmCPUs)})), "the template sets CPUs")
	assert.True(t, staticCount(pod(corev1.Container{Name: "slurmd", Env: env(keys.EnvSlurmRealMemoryMB)})), "the template sets memory")
	assert.True(t, staticCount(pod(corev1.Container{Name: "dra"})), "no slurmd container")
	assert.False(t, staticCount(pod(corev1.Container{Name: "dra", Env: env(keys.EnvSlurmCPUs)}, corev1.Container{Name: "slurmd"})), "the DRA driver's env is not slurmd's")

	p := pod(corev1.Container{Name: "dra"}, corev1.Container{Name: "slurmd", Env: env("OTHER")})
	withShare(p, share{CPUs: 6, MemoryMB: 28672})
	assert.Empty(t, p.Spec.Containers[0].Env, "the DRA driver registers nothing")
	assert.Equal(t, []corev1.EnvVar{{Name: "OTHER", Value: "16"}, {Name: keys.EnvSlurmCPUs, Value: "6"}, {Name: keys.EnvSlurmRealMemoryMB, Value: "28672"}}, p.Spec.Containers[1].Env)
	assert.Equal(t, "cpus=6,memory-mb=28672", p.Annotations[keys.AnnotationSlurmShare])
}

// Against the API server: a Node with 8 allocatable CPUs and 32 GiB, a
// DaemonSet's pod asking 2 CPUs and 4 GiB, a pod onepool placed: the
// slurmd pod registers 6 CPUs and 28 GiB. A second Node with no room gets
// no slurmd pod, and the NodeSet says why. A pod of another scheduler that
// comes later is told on the slurmd pod.
func TestReconcileCountsSlurmsShareOfTheNode(t *testing.T) {
	e := newNodeSetEnv(t)
	ctx := context.Background()
	nodes := e.nodes(2, 2)
	e.setAllocatable(nodes[0], "8", "32Gi")
	e.setAllocatable(nodes[1], "2", "8Gi")
	e.podOn(nodes[0], "ds-a", "2", "4Gi", "")
	e.podOn(nodes[0], "infer", "4", "8Gi", keys.SchedulerName)
	e.podOn(nodes[1], "ds-b", "1500m", "1Gi", "")
	e.create(1)

	testenv.Eventually(t, 30*time.Second, "the slurmd pod on "+nodes[0]+" with Slurm's share", func() (bool, string) {
		p, ok := e.pods()[nodes[0]]
		return ok && p.Annotations[keys.AnnotationSlurmShare] != "", fmt.Sprint(podNodes(e.pods()))
	})
	p := e.pods()[nodes[0]]
	assert.Equal(t, "cpus=6,memory-mb=28672", p.Annotations[keys.AnnotationSlurmShare])
	env := map[string]string{}
	for _, v := range p.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	assert.Equal(t, "6", env[keys.EnvSlurmCPUs])
	assert.Equal(t, "28672", env[keys.EnvSlurmRealMemoryMB])

	testenv.Eventually(t, 30*time.Second, "the NodeSet says "+nodes[1]+" has no room", func() (bool, string) {
		return e.hasEvent(keys.EventNoRoomForSlurm, "request 1500m of 2 allocatable CPUs")
	})
	_, onFull := e.pods()[nodes[1]]
	assert.False(t, onFull, "no slurmd pod where nothing is left for Slurm")

	e.podOn(nodes[0], "late", "1", "1Gi", "other-scheduler")
	testenv.Eventually(t, 30*time.Second, "the slurmd pod is told its share is overcommitted", func() (bool, string) {
		return testenv.HasEvent(e.kc, e.ns, p.Name, keys.EventShareOvercommitted, "registered with cpus=6,memory-mb=28672; pods onepool did not place now leave Slurm cpus=5,memory-mb=27648")
	})
	zero := int64(0) // no kubelet runs here to finish a graceful deletion
	require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, "ds-b", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	testenv.Eventually(t, 60*time.Second, "a slurmd pod on "+nodes[1]+" once the room is there", func() (bool, string) {
		p, ok := e.pods()[nodes[1]]
		return ok && p.Annotations[keys.AnnotationSlurmShare] == "cpus=2,memory-mb=8192", fmt.Sprint(p.Annotations)
	})
}

func (e *nodeSetEnv) setAllocatable(node, cpu, mem string) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
			return err
		}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		n.Status.Capacity = n.Status.Allocatable
		return e.c.Status().Update(context.Background(), n)
	}))
}

// podOn makes a pod bound to node that asks cpu and mem.
func (e *nodeSetEnv) podOn(node, name, cpu, mem, scheduler string) {
	e.t.Helper()
	p := onNode(name, cpu, mem)
	p.Namespace, p.Spec.NodeName, p.Spec.SchedulerName = e.ns, node, scheduler
	p.Spec.Containers[0].Image = "busybox"
	require.NoError(e.t, e.c.Create(context.Background(), &p))
}

// A Node's share is counted again every ShareCheck, and a slurmd pod made
// moments ago was counted when it was made.
func TestShareDue(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	every := time.Minute
	for _, tc := range []struct {
		name                    string
		lastChecked, podCreated time.Time
		want                    bool
	}{
		{"never counted, pod made an hour ago", time.Time{}, now.Add(-time.Hour), true},
		{"never counted again, pod made a second ago", time.Time{}, now.Add(-time.Second), false},
		{"counted a minute ago, old pod", now.Add(-every), now.Add(-time.Hour), true},
		{"counted ten seconds ago, old pod", now.Add(-10 * time.Second), now.Add(-time.Hour), false},
		{"counted long ago, pod replaced ten seconds ago", now.Add(-time.Hour), now.Add(-10 * time.Second), false},
		{"no creation time known", time.Time{}, time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, shareDue(tc.lastChecked, tc.podCreated, now, every))
		})
	}
}
