// Package poolview joins what Kubernetes and Slurm each say of the pool
// into one view, for `kubectl onepool`: per node, the Node's state beside
// the Slurm node's, who owns its drain, and who holds each GPU (a Slurm
// job, or a pod through its job). Pure functions over listings: the
// command reads, this decides.
package poolview

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

// Input is what the view is made of.
type Input struct {
	Nodes      []corev1.Node
	SlurmNodes []model.Node
	Jobs       []model.Job
	// Pods are the pods that may hold a job (any pod with
	// keys.AnnotationJobID; the others are skipped).
	Pods []corev1.Pod
}

// Node is one node of the pool: a Kubernetes Node, its Slurm node, or both.
type Node struct {
	Node      string `json:"node,omitempty"`      // the Kubernetes Node ("" none)
	SlurmNode string `json:"slurmNode,omitempty"` // its Slurm node ("" none)
	// Kubernetes is the Node's state: Ready, NotReady or Unknown, and
	// ",SchedulingDisabled" when cordoned; "" without a Node.
	Kubernetes string `json:"kubernetes,omitempty"`
	Cordoned   bool   `json:"cordoned,omitempty"`
	// Slurm is the Slurm node's state as sinfo shows it ("MIXED+DRAIN");
	// "" without a Slurm node.
	Slurm  string `json:"slurm,omitempty"`
	Reason string `json:"reason,omitempty"`
	// DrainOwner is who owns the drain: syncer, nodeset, agent, admin;
	// "" when Slurm shows none.
	DrainOwner string    `json:"drainOwner,omitempty"`
	DrainBy    string    `json:"drainBy,omitempty"` // the Slurm user who set the reason
	DrainSince time.Time `json:"drainSince,omitzero"`
	GPUs       []GPU     `json:"gpus,omitempty"`
}

// GPU is one GPU GRES index of a Slurm node, and who holds it.
type GPU struct {
	Index int    `json:"index"`
	Type  string `json:"type,omitempty"`
	// Job holds it (0: free); Pod ("namespace/name") when the job is a
	// pod's.
	Job     uint32 `json:"job,omitempty"`
	User    string `json:"user,omitempty"`
	Account string `json:"account,omitempty"`
	Pod     string `json:"pod,omitempty"`
}

// Holder is who holds the GPU in words: "free", "pod ns/name (job 12)",
// "job 12 alice/acct".
func (g GPU) Holder() string {
	switch {
	case g.Job == 0:
		return "free"
	case g.Pod != "":
		return fmt.Sprintf("pod %s (job %d)", g.Pod, g.Job)
	}
	return fmt.Sprintf("job %d %s/%s", g.Job, g.User, g.Account)
}

// SlurmName is the Slurm node a Node stands for: its label
// keys.LabelSlurmNodeName, else its name.
func SlurmName(n *corev1.Node) string {
	if v := n.Labels[keys.LabelSlurmNodeName]; v != "" {
		return v
	}
	return n.Name
}

// Build makes the view: a row per Kubernetes Node that is a Slurm node
// too, or is either alone, sorted by name.
func Build(in Input) []Node {
	slurm := map[string]model.Node{}
	for _, n := range in.SlurmNodes {
		slurm[n.Name] = n
	}
	pods := podsByJob(in.Pods, in.Jobs)
	holders := gpuHolders(in.Jobs)
	var out []Node
	seen := map[string]bool{}
	for i := range in.Nodes {
		k := &in.Nodes[i]
		row := Node{Node: k.Name, Kubernetes: kubeState(k), Cordoned: k.Spec.Unschedulable}
		if s, ok := slurm[SlurmName(k)]; ok {
			seen[s.Name] = true
			fillSlurm(&row, s, k.Annotations, holders, pods, k.Name)
		}
		out = append(out, row)
	}
	for _, s := range in.SlurmNodes {
		if !seen[s.Name] {
			row := Node{}
			fillSlurm(&row, s, nil, holders, pods, "")
			out = append(out, row)
		}
	}
	sort.Slice(out, func(i, j int) bool { return rowName(out[i]) < rowName(out[j]) })
	return out
}

func rowName(n Node) string {
	if n.Node != "" {
		return n.Node
	}
	return n.SlurmNode
}

// fillSlurm sets the Slurm side of row: state, drain and its owner (from
// the Node's records, annotations), and the GPUs' holders.
func fillSlurm(row *Node, s model.Node, annotations map[string]string, holders map[string]map[int]model.Job, pods map[uint32][]corev1.Pod, kubeNode string) {
	row.SlurmNode = s.Name
	row.Slurm = strings.Join(s.State, "+")
	if s.State.Drain() || s.State.Base() == model.NodeDown {
		row.Reason = s.Reason
	}
	if s.State.Drain() {
		w, _ := drain.RecordsIn(annotations).Owner(true, s.Reason, s.ReasonChanged)
		row.DrainOwner, row.DrainBy, row.DrainSince = w.String(), s.ReasonSetByUser, s.ReasonChanged
	}
	for i, t := range model.GPUTypes(s.Gres) {
		g := GPU{Index: i, Type: t}
		if j, ok := holders[s.Name][i]; ok {
			g.Job, g.User, g.Account = j.ID, j.User, j.Account
			g.Pod = podOn(pods[j.ID], kubeNode)
		}
		row.GPUs = append(row.GPUs, g)
	}
}

// gpuHolders maps Slurm node -> GRES index -> the live job holding it.
func gpuHolders(jobs []model.Job) map[string]map[int]model.Job {
	out := map[string]map[int]model.Job{}
	for _, j := range jobs {
		if j.State.Finished() || j.State.Base() == model.JobPending {
			continue
		}
		for node := range j.GresDetail {
			idx, err := j.GPUIndexes(node)
			if err != nil {
				continue
			}
			if out[node] == nil {
				out[node] = map[int]model.Job{}
			}
			for _, i := range idx {
				out[node][i] = j
			}
		}
	}
	return out
}

// podsByJob maps a job to the pods it holds GPUs for: a pod whose
// keys.AnnotationJobID names the job, and whose job's comment names the
// pod. Anyone who can edit a pod can write the annotation; the comment is
// onepool's (signed with a key only the scheduler holds: not verifiable
// here, but a pod's author cannot make another's job name their pod).
func podsByJob(pods []corev1.Pod, jobs []model.Job) map[uint32][]corev1.Pod {
	comments := map[uint32]string{}
	for _, j := range jobs {
		comments[j.ID] = j.Comment
	}
	out := map[uint32][]corev1.Pod{}
	for _, p := range pods {
		id, err := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32)
		if err != nil || id == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if CommentNames(comments[uint32(id)], &p) {
			out[uint32(id)] = append(out[uint32(id)], p)
		}
	}
	return out
}

// CommentNames says whether a placeholder job's comment names pod: the pod
// itself, by namespace, name and uid; or a gang (PodGroup, LeaderWorkerSet
// group, JobSet replicated job) of the pod's namespace.
func CommentNames(comment string, pod *corev1.Pod) bool {
	rest, ok := strings.CutPrefix(comment, keys.PlaceholderCommentPrefix)
	if !ok {
		return false
	}
	if b, ok := strings.CutPrefix(rest, "pod="); ok {
		return strings.HasPrefix(b, pod.Namespace+"/"+pod.Name+";uid="+string(pod.UID)+";")
	}
	for _, gang := range []string{"group=", "lws=", "jobset="} {
		if b, ok := strings.CutPrefix(rest, gang); ok {
			return strings.HasPrefix(b, pod.Namespace+"/")
		}
	}
	return false
}

// podOn is the pod of the job bound to kubeNode (a gang's job has a pod
// per node), else its only pod; "" for none.
func podOn(pods []corev1.Pod, kubeNode string) string {
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName == kubeNode && kubeNode != "" })
	if i < 0 && len(pods) == 1 {
		i = 0
	}
	if i < 0 {
		return ""
	}
	return pods[i].Namespace + "/" + pods[i].Name
}

func kubeState(n *corev1.Node) string {
	s := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			switch c.Status {
			case corev1.ConditionTrue:
				s = "Ready"
			case corev1.ConditionFalse:
				s = "NotReady"
			}
		}
	}
	if n.Spec.Unschedulable {
		s += ",SchedulingDisabled"
	}
	return s
}

// Drain is one drained Slurm node, and who owns the drain.
type Drain struct {
	SlurmNode string    `json:"slurmNode"`
	Node      string    `json:"node,omitempty"`
	Reason    string    `json:"reason"`
	Owner     string    `json:"owner"`
	By        string    `json:"by,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	// Cordoned: the Node is cordoned too.
	Cordoned bool `json:"cordoned,omitempty"`
}

// Drains lists every drain of the view.
func Drains(view []Node) []Drain {
	var out []Drain
	for _, n := range view {
		if n.DrainOwner == "" {
			continue
		}
		out = append(out, Drain{SlurmNode: n.SlurmNode, Node: n.Node, Reason: n.Reason, Owner: n.DrainOwner, By: n.DrainBy,
			Since: n.DrainSince, Cordoned: n.Cordoned})
	}
	return out
}
