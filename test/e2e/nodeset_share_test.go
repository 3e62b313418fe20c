package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// One count of CPUs and memory, with real slurmd: a dynamic node whose
// kubelet offers 8 CPUs and 32 GiB runs a DaemonSet's pod asking 2 CPUs and
// 4 GiB (bound to it as the DaemonSet controller's pods are; the lab runs
// no kube-scheduler in process mode). The NodeSet's slurmd registers with
// what is left: Slurm
// offers 6 CPUs and 28 GiB (scontrol show node), and an 8-CPU job waits
// while a 6-CPU one runs. A pod of another scheduler that comes later is
// told on the slurmd pod.
func TestNodeSetSlurmOffersWhatPodsLeave(t *testing.T) {
	e := newNodeSetEnv(t, "share")
	e.counted = true
	kc, err := e.l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node := e.l.DynNodeNames()[1]
	setNodeAllocatable(t, e.l, node, "8", "32Gi")

	ns := uniqueName("share")
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{lab.LabelGPUClaims: lab.GPUClaimsDisabled}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = kc.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	bound := func(name, cpu, mem, scheduler string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			NodeName: node, SchedulerName: scheduler,
			Containers: []corev1.Container{{Name: "c", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}},
		}}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound("daemonset-pod", "2", "4Gi", "")

	e.start([]string{node}, 1)
	sn := e.slurmNode(node)
	if sn["CPUTot"] != "6" || sn["RealMemory"] != "28672" {
		t.Errorf("Slurm offers CPUTot=%s RealMemory=%s on %s; want 6 and 28672 (8 CPUs and 32 GiB less the DaemonSet's 2 and 4 GiB)", sn["CPUTot"], sn["RealMemory"], node)
	}
	pod := e.pods()[node]
	if got := pod.Annotations[keys.AnnotationSlurmShare]; got != "cpus=6,memory-mb=28672" {
		t.Errorf("the slurmd pod's %s: %q", keys.AnnotationSlurmShare, got)
	}

	// Slurm gives out no more than that.
	sbatch := func(cpus int) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		out, err := e.l.Slurm(cctx, "sbatch", "--parsable", "-J", "e2e-"+e.name, "-p", dynPartition, "-w", node,
			fmt.Sprintf("--cpus-per-task=%d", cpus), "--mem=1024", "-o", "/dev/null", "--wrap", "sleep 300")
		if err != nil {
			t.Fatalf("sbatch: %v %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	state := func(id string) string {
		cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		out, _ := e.l.Slurm(cctx, "squeue", "-h", "-j", id, "-o", "%T")
		return strings.TrimSpace(string(out))
	}
	six := sbatch(6)
	eventually(t, time.Minute, "the 6-CPU job runs", func() (bool, string) {
		st := state(six)
		return st == "RUNNING", st
	})
	one := sbatch(1)
	holds(t, 5*time.Second, "a job asking one CPU more waits", func() (bool, string) {
		st := state(one)
		return st == "PENDING", st
	})
	e.scancel(six)
	e.scancel(one)

	bound("late", "1", "1Gi", "other-scheduler")
	eventually(t, 2*time.Minute, "the slurmd pod is told Slurm's share is overcommitted", func() (bool, string) {
		return testenv.HasEvent(kc, pod.Namespace, pod.Name, keys.EventShareOvercommitted, "leave Slurm cpus=5,memory-mb=27648")
	})
}

// setNodeAllocatable makes the kwok Node offer cpu and mem; the test's
// cleanup gives it back the lab's.
func setNodeAllocatable(t *testing.T, l *lab.Lab, node, cpu, mem string) {
	t.Helper()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	patch := func(cpu, mem string) error {
		b, _ := json.Marshal(map[string]any{"status": map[string]any{
			"capacity":    map[string]string{"cpu": cpu, "memory": mem},
			"allocatable": map[string]string{"cpu": cpu, "memory": mem},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := kc.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
		return err
	}
	if err := patch(cpu, mem); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch(fmt.Sprint(lab.NodeCPUs), fmt.Sprintf("%dMi", lab.NodeMemoryMB)); err != nil {
			t.Errorf("give %s back its allocatable: %v", node, err)
		}
	})
}
