package poolview

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest/model"
)

func kubeNode(name string, ready corev1.ConditionStatus, cordoned bool, labels, annotations map[string]string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:   corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
}

func jobPod(ns, name, node string, job string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{keys.AnnotationJobID: job}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func TestBuild(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	cordon, _ := drain.CordonReason("disk swap")
	record := drain.Record{Reason: cordon, At: at, Exact: true}
	in := Input{
		Nodes: []corev1.Node{
			kubeNode("node-b", corev1.ConditionTrue, true, map[string]string{keys.LabelSlurmNodeName: "gpu-1"},
				record.Annotations(keys.AnnotationDrainApplied, keys.AnnotationDrainAppliedAt)),
			kubeNode("gpu-0", corev1.ConditionTrue, false, nil, nil),
			kubeNode("web-0", corev1.ConditionFalse, false, nil, nil),
		},
		SlurmNodes: []model.Node{
			{Name: "gpu-0", State: model.NodeState{"MIXED"}, Gres: "gpu:h100:2,gpu:a100:1"},
			{Name: "gpu-1", State: model.NodeState{"IDLE", "DRAIN"}, Gres: "gpu:h100:1", Reason: cordon, ReasonChanged: at, ReasonSetByUser: "slurm"},
			{Name: "gpu-9", State: model.NodeState{"DOWN", "DRAIN"}, Gres: "gpu:1", Reason: "bad psu", ReasonChanged: at, ReasonSetByUser: "root"},
		},
		Jobs: []model.Job{
			{ID: 12, User: "alice", Account: "ml", State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:a100:1(IDX:2)"}},
			{ID: 13, User: "slurm", Account: "onepool", State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:0)"},
				Comment: keys.PlaceholderCommentPrefix + "pod=team-a/infer-0;uid=uid-infer-0;user=slurm;sig=AAAA"},
			{ID: 14, User: "bob", State: model.JobState{"COMPLETED"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:1)"}},
		},
		Pods: []corev1.Pod{jobPod("team-a", "infer-0", "gpu-0", "13"), jobPod("team-a", "not-onepools", "gpu-0", ""),
			// A pod's author may write any job id on it: alice's job and
			// infer-0's are not theirs.
			jobPod("team-b", "forged", "gpu-0", "12"), jobPod("team-b", "forged-too", "gpu-0", "13")},
	}
	view := Build(in)
	require.Len(t, view, 4)

	gpu0 := view[0]
	assert.Equal(t, "gpu-0", gpu0.Node)
	assert.Equal(t, "gpu-0", gpu0.SlurmNode)
	assert.Equal(t, "Ready", gpu0.Kubernetes)
	assert.Equal(t, "MIXED", gpu0.Slurm)
	assert.Empty(t, gpu0.DrainOwner)
	var holders []string
	for _, g := range gpu0.GPUs {
		holders = append(holders, g.Type+" "+g.Holder())
	}
	assert.Equal(t, []string{"h100 pod team-a/infer-0 (job 13)", "h100 free", "a100 job 12 alice/ml"}, holders,
		"index by index in Slurm's numbering; an ended job holds nothing")

	gpu9 := view[1]
	assert.Equal(t, Node{SlurmNode: "gpu-9", Slurm: "DOWN+DRAIN", Reason: "bad psu", DrainOwner: "admin", DrainBy: "root", DrainSince: at,
		GPUs: []GPU{{Index: 0}}}, gpu9, "a Slurm node with no Node")

	nodeB := view[2]
	assert.Equal(t, "node-b", nodeB.Node)
	assert.Equal(t, "gpu-1", nodeB.SlurmNode, "by the Node's label")
	assert.Equal(t, "Ready,SchedulingDisabled", nodeB.Kubernetes)
	assert.Equal(t, "syncer", nodeB.DrainOwner, "onepool's record matches Slurm's drain")

	web := view[3]
	assert.Equal(t, Node{Node: "web-0", Kubernetes: "NotReady"}, web, "a Node with no Slurm node")

	drains := Drains(view)
	require.Len(t, drains, 2)
	assert.Equal(t, Drain{SlurmNode: "gpu-9", Reason: "bad psu", Owner: "admin", By: "root", Since: at}, drains[0])
	assert.Equal(t, "syncer", drains[1].Owner)
	assert.True(t, drains[1].Cordoned)
}

// An admin's drain in onepool's words, with no record of onepool's on the
// Node, is the admin's.
func TestBuildDrainInOnepoolsWordsWithoutRecord(t *testing.T) {
	cordon, _ := drain.CordonReason("")
	view := Build(Input{
		Nodes:      []corev1.Node{kubeNode("gpu-0", corev1.ConditionTrue, false, nil, nil)},
		SlurmNodes: []model.Node{{Name: "gpu-0", State: model.NodeState{"IDLE", "DRAIN"}, Reason: cordon, ReasonChanged: time.Now()}},
	})
	require.Len(t, view, 1)
	assert.Equal(t, "admin", view[0].DrainOwner)
}

// Only the comment onepool writes ties a job to a pod: the pod itself
// (namespace, name, uid) or a gang of its namespace.
func TestCommentNames(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "infer-0", UID: "u-1"}}
	p := keys.PlaceholderCommentPrefix
	for comment, want := range map[string]bool{
		p + "pod=ml/infer-0;uid=u-1;user=a;sig=x":  true,
		p + "pod=ml/infer-0;uid=u-2;user=a;sig=x":  false, // a pod of that name before
		p + "pod=ml/infer-00;uid=u-1;user=a;sig=x": false,
		p + "pod=web/infer-0;uid=u-1;user=a;sig=x": false,
		p + "group=ml/train;uid=g-1;user=a;sig=x":  true,
		p + "lws=ml/server/0;uid=g-1;user=a;sig=x": true,
		p + "jobset=web/js/w/0;uid=g;user=a;sig=x": false,
		"pod=ml/infer-0;uid=u-1;user=a;sig=x":      false,
		"":                                         false,
	} {
		assert.Equal(t, want, CommentNames(comment, pod), comment)
	}
}

func TestHoldings(t *testing.T) {
	jobs := []model.Job{
		{ID: 12, State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:a100:1(IDX:2)", "gpu-1": "gpu:h100:2(IDX:0-1)"}},
		{ID: 13, State: model.JobState{"RUNNING"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:0)"},
			Comment: keys.PlaceholderCommentPrefix + "pod=team-a/infer-0;uid=uid-infer-0;user=slurm;sig=AAAA"},
		{ID: 14, State: model.JobState{"COMPLETED"}, GresDetail: map[string]string{"gpu-0": "gpu:h100:1(IDX:1)"}},
		{ID: 15, State: model.JobState{"PENDING"}},
	}
	pods := []corev1.Pod{jobPod("team-a", "infer-0", "gpu-0", "13"), jobPod("team-b", "forged", "gpu-0", "12")}
	assert.Equal(t, []Holding{
		{SlurmNode: "gpu-0", Index: 0, Job: 13, Pod: true},
		{SlurmNode: "gpu-0", Index: 2, Job: 12},
		{SlurmNode: "gpu-1", Index: 0, Job: 12},
		{SlurmNode: "gpu-1", Index: 1, Job: 12},
	}, Holdings(jobs, pods), "a pod claiming alice's job does not make it a pod's; ended and pending jobs hold nothing")
	assert.Empty(t, Holdings(nil, pods))
}
