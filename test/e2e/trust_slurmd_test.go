package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// A tenant: a namespace user with the built-in ClusterRole edit in their
// own namespace and nothing else, as a platform team would set one up.
const (
	tenantNS   = "team-a"
	tenantUser = "tenant-a"
)

// tenantClient is the tenant's client (see asTenant).
func tenantClient(t *testing.T, l *lab.Lab, _ kubernetes.Interface) kubernetes.Interface {
	t.Helper()
	return asTenant(t, l, tenantNS, tenantUser)
}

// A tenant's pod that says it is slurmd — the label, bound to a GPU node
// with spec.nodeName — is not one: no NodeSet owns it. onepool neither
// holds it with its finalizer nor drains the Slurm node when it turns not
// Ready or is deleted.
func TestTrustTenantSlurmdPodIgnored(t *testing.T) {
	l := lab.Shared(t)
	admin, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	tenant := tenantClient(t, l, admin)
	const node, name = "gpu-1", "fake-slurmd"
	ctx := context.Background()
	cleanup := func() { cleanupTenantSlurmd(t, l, admin, node) }
	cleanup() // a previous run may have left it
	t.Cleanup(cleanup)
	undrained := func() (bool, string) {
		kv := scontrolNode(t, l, node)
		return !strings.Contains(kv["State"], "DRAIN") && !strings.HasPrefix(kv["Reason"], "onepool"), kv["State"] + " " + kv["Reason"]
	}
	eventually(t, 10*time.Second, "Slurm node "+node+" not drained before the attack", undrained)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNS, Labels: map[string]string{keys.LabelComponent: keys.ComponentSlurmd}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "slurmd", Image: "onepool/slurmd:lab"}}},
	}
	if _, err := tenant.CoreV1().Pods(tenantNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant creates its pod: %v", err)
	}
	noFinalizer := func() (bool, string) {
		p, err := tenant.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		for _, f := range p.Finalizers {
			if f == keys.FinalizerSlurmdPod {
				return false, "onepool's finalizer on the tenant's pod: " + fmt.Sprint(p.Finalizers)
			}
		}
		for _, k := range []string{keys.AnnotationSlurmNode, keys.AnnotationDrainApplied} {
			if v, ok := p.Annotations[k]; ok {
				return false, fmt.Sprintf("onepool wrote %s=%q on the tenant's pod", k, v)
			}
		}
		return true, ""
	}
	checks := []check{{"Slurm node " + node + " not drained", undrained}, {"the tenant's pod untouched by onepool", noFinalizer}}

	t.Run("not ready", func(t *testing.T) {
		eventually(t, 30*time.Second, "the tenant's pod runs", func() (bool, string) {
			p, err := tenant.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
		})
		// Its container fails its readiness probe, as the tenant can make
		// it do on a real node: here the lab writes what that kubelet would.
		p, err := admin.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		if _, err := admin.CoreV1().Pods(tenantNS).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		watch(t, lab.NotReadyGrace+5*time.Second, checks)
	})

	t.Run("deleted", func(t *testing.T) {
		if err := tenant.CoreV1().Pods(tenantNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("the tenant deletes its pod: %v", err)
		}
		gone := func() (bool, string) {
			p, err := tenant.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("still there, finalizers %v", p.Finalizers)
		}
		eventually(t, 15*time.Second, "the tenant's pod gone", gone)
		watch(t, 5*time.Second, checks)
	})
}

// check is one thing that must hold all along, by name.
type check struct {
	what string
	cond func() (bool, string)
}

// watch polls every check for d and reports the first failure of each:
// an attack shows everything it got.
func watch(t *testing.T, d time.Duration, checks []check) {
	t.Helper()
	failed := make([]string, len(checks))
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		for i, c := range checks {
			if ok, state := c.cond(); !ok && failed[i] == "" {
				failed[i] = state
			}
		}
	}
	for i, c := range checks {
		if failed[i] != "" {
			t.Errorf("%s: not so: %s", c.what, failed[i])
		}
	}
}

// cleanupTenantSlurmd takes the tenant's pods away, onepool's finalizer
// first (today's code puts it there), and gives the Slurm node back as it
// was: a drain onepool made resumed, its record gone from the Node.
func cleanupTenantSlurmd(t *testing.T, l *lab.Lab, admin kubernetes.Interface, node string) {
	ctx := context.Background()
	pods, err := admin.CoreV1().Pods(tenantNS).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			_, _ = admin.CoreV1().Pods(tenantNS).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = admin.CoreV1().Pods(tenantNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null,%q:null,%q:null}}}`,
		keys.AnnotationDrainApplied, keys.AnnotationDrainAppliedAt, keys.AnnotationDrainReplaced, keys.AnnotationDrainResumed)
	_, _ = admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if kv := scontrolNode(t, l, node); strings.Contains(kv["State"], "DRAIN") && strings.HasPrefix(kv["Reason"], "onepool") {
		_, _ = l.Slurm(ctx, "scontrol", "update", "nodename="+node, "state=resume")
	}
}
