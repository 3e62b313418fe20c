package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// KillPodContainers SIGKILLs the containers of a pod on the real node
// through containerd, as a crash would (the kubelet then restarts them).
func (n *Node) KillPodContainers(ctx context.Context, pod *corev1.Pod) error {
	for _, cs := range pod.Status.ContainerStatuses {
		id, ok := strings.CutPrefix(cs.ContainerID, "containerd://")
		if !ok {
			return fmt.Errorf("pod %s: container %s has no containerd id (%q)", pod.Name, cs.Name, cs.ContainerID)
		}
		if out, err := n.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
			return fmt.Errorf("pod %s: ctr tasks kill %s: %w: %s", pod.Name, id, err, out)
		}
	}
	return nil
}

// ContainerMemory is a pod's containers' memory as the kubelet reports it
// (its summary API, read through the apiserver): working set and RSS bytes.
func (n *Node) ContainerMemory(ctx context.Context, namespace, pod string) (workingSet, rss uint64, err error) {
	kc, err := n.Client()
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", Name, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("kubelet summary of %s: %w", Name, err)
	}
	var sum struct {
		Pods []struct {
			PodRef     struct{ Name, Namespace string } `json:"podRef"`
			Containers []struct {
				Memory *struct {
					WorkingSetBytes *uint64 `json:"workingSetBytes"`
					RSSBytes        *uint64 `json:"rssBytes"`
				} `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		return 0, 0, fmt.Errorf("kubelet summary: %w", err)
	}
	for _, p := range sum.Pods {
		if p.PodRef.Name != pod || p.PodRef.Namespace != namespace {
			continue
		}
		for _, c := range p.Containers {
			if c.Memory == nil || c.Memory.WorkingSetBytes == nil {
				return 0, 0, fmt.Errorf("kubelet summary: pod %s/%s has no memory figures yet", namespace, pod)
			}
			workingSet += *c.Memory.WorkingSetBytes
			if c.Memory.RSSBytes != nil {
				rss += *c.Memory.RSSBytes
			}
		}
		return workingSet, rss, nil
	}
	return 0, 0, fmt.Errorf("kubelet summary: no pod %s/%s", namespace, pod)
}
