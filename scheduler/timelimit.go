package scheduler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// labelLWSName is the label LeaderWorkerSet's controller puts on every pod
// of a group (leader and workers alike).
const labelLWSName = "leaderworkerset.sigs.k8s.io/name"

// replicaOf names the long-running workload a pod is a replica of
// ("ReplicaSet web-5d8f", "StatefulSet db", "LeaderWorkerSet vllm"): a pod
// its controller makes again whenever it ends. "" for a pod whose end is
// its purpose (a Job's) or that nothing makes again (a bare pod).
func replicaOf(pod *corev1.Pod) string {
	if name := pod.Labels[labelLWSName]; name != "" {
		return "LeaderWorkerSet " + name
	}
	c := metav1.GetControllerOf(pod)
	if c == nil {
		return ""
	}
	switch c.Kind {
	case "ReplicaSet", "StatefulSet", "ReplicationController":
		return c.Kind + " " + c.Name
	}
	return ""
}

// timeLimitWarning is what a replica's owner should hear when its Slurm
// job has a time limit the pod did not ask for (the partition's or the
// QOS's, or the scheduler's default): Slurm ends the job then, the pod is
// evicted, and its controller makes a new one that waits in the queue. ""
// when there is nothing to say: no limit, the pod chose one, or the pod
// is not a replica.
func timeLimitWarning(pod *corev1.Pod, j *slurmrest.Job) string {
	if j == nil || j.TimeLimit <= 0 {
		return ""
	}
	if _, asked := pod.Annotations[keys.AnnotationJobTimeLimit]; asked {
		return ""
	}
	replica := replicaOf(pod)
	if replica == "" {
		return ""
	}
	end := ""
	if !j.StartTime.IsZero() {
		end = " at " + j.StartTime.Add(j.TimeLimit).UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Slurm job %d of partition %s ends%s, after its time limit %s, which the pod did not ask for; "+
		"this replica of %s is evicted then, and the new pod its controller makes waits in Slurm's queue again. "+
		"Ask for longer with annotation %s (UNLIMITED where the partition and QOS allow it)",
		j.ID, j.Partition, end, timeLimitText(j.TimeLimit), replica, keys.AnnotationJobTimeLimit)
}
