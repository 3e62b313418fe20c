package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// An existing Slurm cluster: the lab's static nodes' slurmd run as
// processes on this machine, as a host's slurmd under systemd would, and
// their Nodes have no slurmd pod. Labelled as the README says, a Node's
// cordon drains its Slurm node and Slurm's drain shows on it; a second
// Node that names the same Slurm node (a node that renamed itself) is
// refused.
func TestSyncerHostSlurmdNode(t *testing.T) {
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node := hostSlurmdCandidate(t, l)
	e := &syncerEnv{t: t, l: l, kc: kc, node: node}
	label := keys.LabelSlurmdOnHost + "=true"
	impostor := "e2e-host-impostor"
	cleanup := func() {
		e.kubectlQuiet("delete", "node", impostor, "--ignore-not-found")
		e.kubectlQuiet("uncordon", node)
		e.kubectlQuiet("label", "node", node, keys.LabelSlurmdOnHost+"-")
		e.kubectlQuiet("annotate", "node", node, keys.AnnotationCordonReason+"-", keys.AnnotationDrainApplied+"-", keys.AnnotationDrainAppliedAt+"-", keys.AnnotationDrainReplaced+"-", keys.AnnotationDrainResumed+"-")
		if kv := scontrolNode(t, l, node); strings.Contains(kv["State"], "DRAIN") {
			_, _ = l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=resume")
		}
	}
	cleanup()
	t.Cleanup(cleanup)

	// Not selected yet: a cordon changes nothing in Slurm.
	e.kubectl("cordon", node)
	e.holds(3*time.Second, "no drain for a Node that is not a host-slurmd Node", func() (bool, string) {
		kv := scontrolNode(t, l, node)
		return !strings.Contains(kv["State"], "DRAIN"), kv["State"] + " " + kv["Reason"]
	})
	e.kubectl("uncordon", node)

	e.kubectl("label", "node", node, label)
	e.kubectl("annotate", "--overwrite", "node", node, keys.AnnotationCordonReason+"=e2e host maintenance")
	e.kubectl("cordon", node)
	e.waitSlurm(15*time.Second, true, drain.ReasonCordoned+": e2e host maintenance")
	eventually(t, 10*time.Second, "the Node records onepool's drain and says so", func() (bool, string) {
		n, c := e.getNode(), e.condition()
		return n.Annotations[keys.AnnotationDrainApplied] != "" && c != nil && c.Reason == keys.ConditionReasonDrainedByOwner,
			fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	eventually(t, 10*time.Second, "Drained event on the Node", func() (bool, string) { return e.hasEvent("default", node, keys.EventDrained) })
	e.kubectl("uncordon", node)
	e.waitSlurm(15*time.Second, false, "")

	// Slurm → Kubernetes: an admin's drain shows on the Node, and an
	// uncordon does not resume it.
	e.scontrol("update", "nodename="+node, "state=drain", "reason=e2e host admin")
	eventually(t, 10*time.Second, "the admin's drain on the Node", func() (bool, string) {
		n, c := e.getNode(), e.condition()
		return n.Annotations[keys.AnnotationSlurmReason] == "e2e host admin" && c != nil && c.Status == corev1.ConditionTrue && c.Reason == keys.ConditionReasonDrained,
			fmt.Sprintf("%v %+v", n.Annotations, c)
	})
	e.kubectl("cordon", node)
	e.kubectl("uncordon", node)
	e.holds(3*time.Second, "the admin's drain stays", func() (bool, string) {
		kv := scontrolNode(t, l, node)
		return strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], "e2e host admin"), kv["State"] + " " + kv["Reason"]
	})
	e.scontrol("update", "nodename="+node, "state=resume")
	eventually(t, 10*time.Second, "the mirror cleared", func() (bool, string) {
		_, ok := e.getNode().Annotations[keys.AnnotationSlurmReason]
		return !ok, fmt.Sprint(e.getNode().Annotations)
	})

	// A Node that names the same Slurm node (as a kubelet that labelled
	// itself could): refused, with an event on it, and Slurm untouched.
	imp := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: impostor, Labels: map[string]string{
		keys.LabelSlurmdOnHost: "true", keys.LabelSlurmNodeName: node,
	}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	if _, err := kc.CoreV1().Nodes().Create(ctx, imp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "SlurmNodeClaimedTwice on the impostor", func() (bool, string) {
		return e.hasEvent("default", impostor, keys.EventSlurmNodeShared)
	})
	e.holds(3*time.Second, "no drain from the impostor", func() (bool, string) {
		kv := scontrolNode(t, l, node)
		return !strings.Contains(kv["State"], "DRAIN"), kv["State"] + " " + kv["Reason"]
	})
}

// hostSlurmdCandidate is a static lab node whose slurmd runs as a process
// and that no slurmd pod serves (`make up` gives the static nodes slurmd
// pods; make test's lab does not).
func hostSlurmdCandidate(t *testing.T, l *lab.Lab) string {
	t.Helper()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	pods, err := kc.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{LabelSelector: keys.LabelComponent + "=" + keys.ComponentSlurmd})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, p := range pods.Items {
		served[p.Annotations[keys.AnnotationSlurmNode]] = true
		served[p.Spec.NodeName] = true
	}
	for _, n := range []string{"gpu-3", "gpu-2", "gpu-1", "gpu-0"} {
		if !served[n] {
			return n
		}
	}
	t.Skip("every static lab node has a slurmd pod (a `make up` lab); make test's lab has none")
	return ""
}
