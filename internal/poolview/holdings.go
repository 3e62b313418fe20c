package poolview

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/slurmrest/model"
)

// Holding is one GPU in use: a Slurm node's GRES index, the live job that
// holds it, and whether that job is a pod's (its comment names a pod
// that carries the job's id).
type Holding struct {
	SlurmNode string
	Index     int
	Job       uint32
	Pod       bool
}

// Holdings are the GPUs jobs hold, sorted by node and index: what the
// one-pool view shows, without the free GPUs (which need Slurm's nodes).
func Holdings(jobs []model.Job, pods []corev1.Pod) []Holding {
	byJob := podsByJob(pods, jobs)
	var out []Holding
	for node, idx := range gpuHolders(jobs) {
		for i, j := range idx {
			out = append(out, Holding{SlurmNode: node, Index: i, Job: j.ID, Pod: len(byJob[j.ID]) > 0})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].SlurmNode != out[b].SlurmNode {
			return out[a].SlurmNode < out[b].SlurmNode
		}
		return out[a].Index < out[b].Index
	})
	return out
}
