package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
)

// A pod's node selector reaches Slurm (issue 36). With every node free,
// the job of a pod whose selector matches only the last node runs there
// (Slurm leaves the others out: ExcNodeList), and the pod binds there. A
// pod no node fits asks Slurm nothing and says why, in kube-scheduler's
// words; once a Node is labelled to fit it, it is placed.
func TestSchedulerNodeSelectorReachesSlurm(t *testing.T) {
	e := newSchedEnv(t)
	nodes := e.l.NodeNames()
	first, last := nodes[0], nodes[len(nodes)-1]
	key := "e2e.onepool.dev/" + e.ns // this test's own label
	e.labelNode(last, key, "picked")

	p := e.pod("picky", 1, nil)
	p.Spec.NodeSelector = map[string]string{key: "picked"}
	e.create(p)
	if got := e.waitBound("picky", 30*time.Second); got != last {
		t.Fatalf("picky bound to %s, want %s (the only node its selector matches)", got, last)
	}
	sj := scontrolJob(t, e.l, e.onlyJob("picky").ID)
	if sj["NodeList"] != last {
		t.Errorf("picky's job runs on %s, want %s", sj["NodeList"], last)
	}
	for _, n := range nodes[:len(nodes)-1] {
		if !strings.Contains(expandForTest(t, sj["ExcNodeList"]), n) {
			t.Errorf("picky's job does not leave out %s: ExcNodeList=%s", n, sj["ExcNodeList"])
		}
	}

	q := e.pod("nowhere", 1, nil)
	q.Spec.NodeSelector = map[string]string{key: "nowhere"}
	e.create(q)
	msg := e.waitPendingWith("nowhere", "no Slurm node fits the pod", 20*time.Second)
	if want := "node(s) didn't match Pod's node affinity/selector"; !strings.Contains(msg, want) {
		t.Errorf("pending message lacks %q: %s", want, msg)
	}
	eventually(t, 10*time.Second, keys.EventNoNodeFits+" event", func() (bool, string) {
		return e.hasEvent("nowhere", keys.EventNoNodeFits, "didn't match Pod's node affinity/selector")
	})
	e.holdsPod(5*time.Second, "nowhere", func(p *corev1.Pod) (bool, string) {
		js := e.jobs("nowhere")
		return len(js) == 0 && p.Spec.NodeName == "", fmt.Sprintf("jobs %v, node %q", jobIDs(js), p.Spec.NodeName)
	})

	e.labelNode(first, key, "nowhere")
	if got := e.waitBound("nowhere", 30*time.Second); got != first {
		t.Fatalf("nowhere bound to %s, want %s (labelled for it)", got, first)
	}
}

// labelNode sets a label on a Node until the test ends.
func (e *schedEnv) labelNode(node, key, value string) {
	e.t.Helper()
	patch := func(v any) error {
		b := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
		_, err := e.kc.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(b), metav1.PatchOptions{})
		return err
	}
	if err := patch(fmt.Sprintf("%q", value)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := patch("null"); err != nil {
			e.t.Errorf("removing label %s from %s: %v", key, node, err)
		}
	})
}
