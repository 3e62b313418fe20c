package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkNodeFitUnfit10kNodes: what NodeFit costs a submission (and each
// waiting job's re-exclusion on a Node change) in a 10,000-Node cluster.
func BenchmarkNodeFitUnfit10kNodes(b *testing.B) {
	const n = 10000
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		name := fmt.Sprintf("gpu-%05d", i)
		nodes[i] = node(name, map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: fmt.Sprintf("z%d", i%10),
			"nvidia.com/gpu.product": []string{"H100", "A100"}[i%2]})
		if i%4 == 0 {
			nodes[i].Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}}
		}
	}
	pvc, pv := boundClaim("ns", "data", localPV("pv-1", map[string]string{corev1.LabelTopologyZone: "z2"}, "gpu-00042"))
	fit, _, _ := volumeFit(b, pvc, pv)
	plain := podWith(nil, 1, "", "")
	selective := podWith(nil, 1, "", "")
	selective.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.product": "H100"}
	selective.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "training", Effect: corev1.TaintEffectNoSchedule}}
	volume := withClaim(podWith(nil, 1, "", ""), "data")
	for _, bc := range []struct {
		name  string
		pod   *corev1.Pod
		unfit int
	}{
		{"no constraint", plain, n / 4},
		{"node selector and toleration", selective, n / 2},
		{"bound PV with node affinity", volume, n - 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				unfit, err := fit.Unfit(context.Background(), bc.pod, nodes)
				if err != nil || len(unfit) != bc.unfit {
					b.Fatalf("unfit %d nodes (%v), want %d", len(unfit), err, bc.unfit)
				}
			}
		})
	}
}
