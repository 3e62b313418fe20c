package scheduler

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
)

// owner is what one placeholder job holds a place for: a single pod, or
// all pods of a PodGroup (a gang, placed as one multi-node job).
type owner struct {
	Namespace string
	Name      string    // the pod's or the PodGroup's name
	UID       types.UID // the pod's; empty for a group
	Group     bool
}

// ownerOf returns the owner a pod belongs to.
func ownerOf(pod *corev1.Pod) owner {
	if g := pod.Labels[keys.LabelPodGroup]; g != "" {
		return owner{Namespace: pod.Namespace, Name: g, Group: true}
	}
	return owner{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// key identifies the owner in maps and work queues.
func (o owner) key() string {
	if o.Group {
		return "group/" + o.Namespace + "/" + o.Name
	}
	return "pod/" + string(o.UID)
}

func (o owner) String() string {
	if o.Group {
		return "PodGroup " + o.Namespace + "/" + o.Name
	}
	return "pod " + o.Namespace + "/" + o.Name
}

// The job's comment names its owner; onepool finds its placeholder jobs,
// after a restart too, by this prefix.
const commentPrefix = keys.PlaceholderCommentPrefix

// jobName is the placeholder job's name as squeue shows it.
func (o owner) jobName() string { return "onepool/" + o.Namespace + "/" + o.Name }

// comment encodes the owner into the job's comment.
func (o owner) comment() string {
	if o.Group {
		return fmt.Sprintf("%sgroup=%s/%s", commentPrefix, o.Namespace, o.Name)
	}
	return fmt.Sprintf("%spod=%s/%s;uid=%s", commentPrefix, o.Namespace, o.Name, o.UID)
}

// parseComment reads an owner back from a job comment; ok is false for
// jobs onepool did not submit.
func parseComment(c string) (owner, bool) {
	rest, ok := strings.CutPrefix(c, commentPrefix)
	if !ok {
		return owner{}, false
	}
	if g, ok := strings.CutPrefix(rest, "group="); ok {
		ns, name, ok := strings.Cut(g, "/")
		if !ok || ns == "" || name == "" || strings.ContainsAny(name, "/;") {
			return owner{}, false
		}
		return owner{Namespace: ns, Name: name, Group: true}, true
	}
	p, ok := strings.CutPrefix(rest, "pod=")
	if !ok {
		return owner{}, false
	}
	nsName, uid, ok := strings.Cut(p, ";uid=")
	if !ok || uid == "" {
		return owner{}, false
	}
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return owner{}, false
	}
	return owner{Namespace: ns, Name: name, UID: types.UID(uid)}, true
}
