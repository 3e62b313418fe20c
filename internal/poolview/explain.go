package poolview

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

// Explanation is why a pod waits, runs where it runs, or was evicted, in
// one screen: the pod's scheduling condition, its Slurm job and that job's
// place in its partition's queue, the TenantPolicy that covers it, its
// last events.
type Explanation struct {
	Pod       string `json:"pod"`
	Phase     string `json:"phase"`
	Node      string `json:"node,omitempty"`
	Scheduled string `json:"scheduled,omitempty"` // the PodScheduled condition
	Policy    string `json:"policy,omitempty"`    // the TenantPolicy, or why none
	// Job is the pod's Slurm job (nil: none, JobNote says why).
	Job     *JobView    `json:"job,omitempty"`
	JobNote string      `json:"jobNote,omitempty"`
	Events  []EventLine `json:"events,omitempty"`
}

// JobView is a Slurm job as explain shows it.
type JobView struct {
	ID        uint32 `json:"id"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	Partition string `json:"partition,omitempty"`
	QOS       string `json:"qos,omitempty"`
	Account   string `json:"account,omitempty"`
	User      string `json:"user,omitempty"`
	Priority  uint32 `json:"priority"`
	Nodes     string `json:"nodes,omitempty"`
	// Position is its place among the partition's pending jobs (1 first,
	// by priority then submission), of Pending; 0 when it does not pend.
	Position int `json:"position,omitempty"`
	Pending  int `json:"pending,omitempty"`
}

// EventLine is one event of the pod.
type EventLine struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// maxEvents is how many of the pod's last events explain shows.
const maxEvents = 8

// Explain makes the explanation of pod from Slurm's jobs, the policy
// line and the pod's events.
func Explain(pod *corev1.Pod, jobs []model.Job, policy string, events []corev1.Event) Explanation {
	x := Explanation{Pod: pod.Namespace + "/" + pod.Name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName, Policy: policy}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			x.Scheduled = string(c.Status)
			if c.Reason != "" || c.Message != "" {
				x.Scheduled += strings.TrimRight(" "+c.Reason+": "+c.Message, ": ")
			}
		}
	}
	if pod.Spec.SchedulerName != keys.SchedulerName {
		x.JobNote = fmt.Sprintf("the pod's scheduler is %q, not %s: Slurm does not place it", pod.Spec.SchedulerName, keys.SchedulerName)
	} else if v, ok := pod.Annotations[keys.AnnotationJobID]; !ok {
		x.JobNote = "the pod names no Slurm job yet (" + keys.AnnotationJobID + "): onepool has not submitted it, see the condition and events"
	} else if id, err := strconv.ParseUint(v, 10, 32); err != nil {
		x.JobNote = fmt.Sprintf("%s=%q is not a job id", keys.AnnotationJobID, v)
	} else {
		x.Job, x.JobNote = jobView(pod, uint32(id), jobs)
	}
	sort.SliceStable(events, func(i, j int) bool { return eventTime(events[i]).After(eventTime(events[j])) })
	for _, e := range events[:min(len(events), maxEvents)] {
		x.Events = append(x.Events, EventLine{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count})
	}
	return x
}

func jobView(pod *corev1.Pod, id uint32, jobs []model.Job) (*JobView, string) {
	var job *model.Job
	for i := range jobs {
		if jobs[i].ID == id {
			job = &jobs[i]
		}
	}
	if job == nil {
		return nil, fmt.Sprintf("job %d is not in Slurm's listing: it ended and was purged (MinJobAge)", id)
	}
	if !CommentNames(job.Comment, pod) {
		return nil, fmt.Sprintf("%s=%d, but job %d's comment does not name this pod: not onepool's record (anyone who may edit the pod can write the annotation)",
			keys.AnnotationJobID, id, id)
	}
	v := &JobView{ID: job.ID, State: strings.Join(job.State, "+"), Reason: job.Reason, Partition: job.Partition, QOS: job.QOS,
		Account: job.Account, User: job.User, Priority: job.Priority, Nodes: job.Nodes}
	if job.State.Base() != model.JobPending {
		return v, ""
	}
	var queue []model.Job
	for _, j := range jobs {
		if j.State.Base() == model.JobPending && j.Partition == job.Partition {
			queue = append(queue, j)
		}
	}
	sort.SliceStable(queue, func(a, b int) bool {
		if queue[a].Priority != queue[b].Priority {
			return queue[a].Priority > queue[b].Priority
		}
		return queue[a].SubmitTime.Before(queue[b].SubmitTime)
	})
	for i, j := range queue {
		if j.ID == id {
			v.Position = i + 1
		}
	}
	v.Pending = len(queue)
	return v, ""
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// Print writes the explanation as text.
func (x Explanation) Print(w io.Writer, now time.Time) {
	fmt.Fprintf(w, "Pod:        %s (%s)\n", x.Pod, x.Phase)
	if x.Node != "" {
		fmt.Fprintf(w, "Node:       %s\n", x.Node)
	}
	if x.Scheduled != "" {
		fmt.Fprintf(w, "Scheduled:  %s\n", x.Scheduled)
	}
	if x.Policy != "" {
		fmt.Fprintf(w, "Policy:     %s\n", x.Policy)
	}
	if j := x.Job; j != nil {
		fmt.Fprintf(w, "Slurm job:  %d %s", j.ID, j.State)
		if j.Reason != "" && j.Reason != "None" {
			fmt.Fprintf(w, " (%s)", j.Reason)
		}
		fmt.Fprintf(w, ", partition %s, QOS %s, account %s, user %s, priority %d\n", j.Partition, j.QOS, j.Account, j.User, j.Priority)
		if j.Nodes != "" {
			fmt.Fprintf(w, "            on %s\n", j.Nodes)
		}
		if j.Position > 0 {
			fmt.Fprintf(w, "            pending: %d of %d in partition %s (by priority, then submission)\n", j.Position, j.Pending, j.Partition)
		}
	} else if x.JobNote != "" {
		fmt.Fprintf(w, "Slurm job:  none: %s\n", x.JobNote)
	}
	if len(x.Events) == 0 {
		fmt.Fprintln(w, "Events:     none")
		return
	}
	fmt.Fprintln(w, "Events (newest first):")
	for _, e := range x.Events {
		age := "?"
		if !e.Time.IsZero() {
			age = now.Sub(e.Time).Round(time.Second).String()
		}
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(w, "  %-8s %-7s %s%s: %s\n", age, e.Type, e.Reason, count, e.Message)
	}
}
