package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
)

// A pod's volume topology reaches Slurm (issue 36 item 1), as
// kube-scheduler's VolumeBinding decides it, with the PV controller of the
// lab's kube-controller-manager binding the claims:
//   - a claim bound to a local PV of one node: the job of the pod that
//     uses it leaves out every other node (ExcNodeList) and runs there,
//     and the pod binds there, though every node is free;
//   - a claim bound to a PV of a node outside the pool: the pod asks Slurm
//     nothing and waits in kube-scheduler's words;
//   - a claim not bound yet (its PV does not exist): the pod waits; once
//     the PV comes and the PV controller binds the claim, the pod is
//     placed without any other change (the claim's event wakes it).
func TestSchedulerVolumeTopologyReachesSlurm(t *testing.T) {
	e := newSchedEnv(t)
	nodes := e.l.NodeNames()
	target := nodes[len(nodes)/2]

	e.localVolume("data", target)
	e.create(withVolume(e.pod("stateful", 1, nil), "data"))
	if got := e.waitBound("stateful", 30*time.Second); got != target {
		t.Fatalf("stateful bound to %s, want %s (the node of its claim's PV)", got, target)
	}
	sj := scontrolJob(t, e.l, e.onlyJob("stateful").ID)
	assert.Equal(t, target, sj["NodeList"], "stateful's job runs on its volume's node")
	excluded := expandForTest(t, sj["ExcNodeList"])
	for _, n := range nodes {
		if n != target && !strings.Contains(excluded, n) {
			t.Errorf("stateful's job does not leave out %s: ExcNodeList=%s", n, sj["ExcNodeList"])
		}
	}

	e.localVolume("elsewhere", "not-in-the-pool")
	e.create(withVolume(e.pod("stranded", 1, nil), "elsewhere"))
	msg := e.waitPendingWith("stranded", "no Slurm node fits the pod", 20*time.Second)
	if want := "node(s) didn't match PersistentVolume's node affinity"; !strings.Contains(msg, want) {
		t.Errorf("pending message lacks %q: %s", want, msg)
	}
	e.holdsPod(5*time.Second, "stranded", func(p *corev1.Pod) (bool, string) {
		js := e.jobs("stranded")
		return len(js) == 0 && p.Spec.NodeName == "", fmt.Sprintf("jobs %v, node %q", jobIDs(js), p.Spec.NodeName)
	})

	// The claim first, naming a PV that is not there yet.
	pvName := e.ns + "-later"
	e.claim("later", pvName)
	e.create(withVolume(e.pod("patient", 1, nil), "later"))
	e.waitPendingWith("patient", "unbound immediate PersistentVolumeClaims", 20*time.Second)
	if js := e.jobs("patient"); len(js) != 0 {
		t.Errorf("patient asked Slurm with its claim unbound: jobs %v", jobIDs(js))
	}
	want := nodes[0]
	e.persistentVolume(pvName, "later", want)
	if got := e.waitBound("patient", 60*time.Second); got != want {
		t.Fatalf("patient bound to %s, want %s (the node of the PV its claim was bound to)", got, want)
	}
	eventually(t, 10*time.Second, keys.EventNoNodeFits+" event of the stranded pod", func() (bool, string) {
		return e.hasEvent("stranded", keys.EventNoNodeFits, "didn't match PersistentVolume's node affinity")
	})
}

// localVolume makes a PersistentVolumeClaim and a local PV on node for it
// (named after the test's namespace and the claim) until the test ends,
// and waits for the PV controller to bind them.
func (e *schedEnv) localVolume(claim, node string) {
	e.t.Helper()
	pv := e.ns + "-" + claim
	e.persistentVolume(pv, claim, node)
	e.claim(claim, pv)
	eventually(e.t, 30*time.Second, "claim "+claim+" bound", func() (bool, string) {
		c, err := e.kc.CoreV1().PersistentVolumeClaims(e.ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return c.Status.Phase == corev1.ClaimBound, string(c.Status.Phase)
	})
}

// persistentVolume makes a local PV on node, reserved for the claim (its
// claimRef), deleted when the test ends.
func (e *schedEnv) persistentVolume(name, claim, node string) {
	e.t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.ns, Name: claim},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	_, err := e.kc.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		err := e.kc.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.t.Errorf("delete PV %s: %v", name, err)
		}
	})
}

// claim makes a PersistentVolumeClaim for the PV named pv (storage class
// "": bound by the PV controller at once, not at first use).
func (e *schedEnv) claim(name, pv string) {
	e.t.Helper()
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: new(string),
			VolumeName:       pv,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err := e.kc.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), c, metav1.CreateOptions{})
	require.NoError(e.t, err)
}

// withVolume mounts the claim in the pod.
func withVolume(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: claim,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: claim, MountPath: "/" + claim})
	return p
}
