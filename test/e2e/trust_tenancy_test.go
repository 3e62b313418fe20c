package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
	"github.com/onepool/onepool/test/lab"
)

// teamEnv is a scheduler test namespace that belongs to the lab's team B:
// a TenantPolicy (made by the admin) covers it, and its pods are made by
// the namespace's own user.
type teamEnv struct {
	*schedEnv
	tenant kubernetes.Interface
	admin  client.Client
	policy *v1alpha1.TenantPolicy
}

// newTeamBEnv: team B may use QOS normal only, charges its own account,
// runs as its own Slurm user, at most maxPerPod GPUs a pod and maxGPUs in
// all (0: no cap).
func newTeamBEnv(t *testing.T, maxPerPod, maxGPUs int32, qos ...string) *teamEnv {
	t.Helper()
	e := &teamEnv{schedEnv: newSchedEnv(t)}
	var err error
	if e.admin, err = e.l.Client(); err != nil {
		t.Fatal(err)
	}
	if len(qos) == 0 {
		qos = []string{lab.QOSNormal}
	}
	e.policy = &v1alpha1.TenantPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + e.ns},
		Spec: v1alpha1.TenantPolicySpec{
			Namespaces:    v1alpha1.NamespaceSelector{Names: []string{e.ns}},
			SlurmUser:     lab.TeamB,
			Accounts:      v1alpha1.Choice{Default: lab.TeamB},
			QOS:           v1alpha1.Choice{Allowed: qos, Default: lab.QOSNormal},
			MaxGPUsPerPod: maxPerPod,
			MaxGPUs:       maxGPUs,
		},
	}
	if err := e.admin.Create(context.Background(), e.policy); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: this one before the namespace's.
	// The pods go before the policy: a pod the policy refuses would
	// otherwise fall to the lab's default policy, which allows more, and
	// be placed while the test ends (ci-fresh: a QOS-high job submitted
	// 0.2 s after the policy went, found by the cleanup's job check).
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		_ = e.kc.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if pods, err := e.kc.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil && len(pods.Items) == 0 {
				break
			}
		}
		_ = e.admin.Delete(ctx, e.policy)
	})
	e.tenant = asTenant(t, e.l, e.ns, "tenant-b")
	return e
}

// create makes a pod as the tenant.
func (e *teamEnv) create(p *corev1.Pod) (*corev1.Pod, error) {
	return e.tenant.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
}

// A tenant asks what its policy does not allow: a QOS that preempts
// training, another team's account, whole nodes, more GPUs than a pod may
// have. On 8ad38d6 every one of these became a Slurm job (a 1-GPU pod with
// QOS high preempted a running training job within seconds). Now each is
// refused at creation, with the policy and the value in the message, and
// Slurm never sees a job.
func TestTrustTenantPolicyRefusesAtAdmission(t *testing.T) {
	e := newTeamBEnv(t, 2, 0)
	for _, tc := range []struct {
		name string
		ann  map[string]string
		gpus int64
		says string
	}{
		{"qos-high", map[string]string{keys.AnnotationJobQOS: lab.QOSHigh}, 1, `does not allow QOS "high" (allowed: normal)`},
		{"other-account", map[string]string{keys.AnnotationJobAccount: lab.TeamA}, 1, `does not allow account "team-a" (allowed: team-b)`},
		{"whole-nodes", map[string]string{keys.AnnotationJobExclusive: "node"}, 1, `does not allow exclusive mode "node"`},
		{"four-gpus", nil, 4, `does not allow GPUs per pod "4" (allowed: at most 2)`},
	} {
		_, err := e.create(e.pod(tc.name, tc.gpus, tc.ann))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("TenantPolicy %q %s", e.policy.Name, tc.says)) {
			t.Errorf("%s: the tenant's pod: %v; want refused: %s", tc.name, err, tc.says)
		}
	}
	holds(t, 3*time.Second, "Slurm has no job of the namespace", func() (bool, string) {
		js := e.jobs("")
		return len(js) == 0, fmt.Sprint(jobIDs(js))
	})

	// The policy's status says what it covers; a second policy over the
	// same namespace is a conflict, shown there, and the pods are refused.
	ctx := context.Background()
	ready := func(status metav1.ConditionStatus, reason string) func() (bool, string) {
		return func() (bool, string) {
			p := &v1alpha1.TenantPolicy{}
			if err := e.admin.Get(ctx, client.ObjectKeyFromObject(e.policy), p); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(p.Status.Conditions, tenancy.ConditionReady)
			return p.Status.Namespaces == 1 && c != nil && c.Status == status && c.Reason == reason, fmt.Sprintf("%+v", p.Status)
		}
	}
	eventually(t, 20*time.Second, "the policy covers one namespace", ready(metav1.ConditionTrue, tenancy.ReasonCovers))
	second := &v1alpha1.TenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: e.policy.Name + "-2"},
		Spec: v1alpha1.TenantPolicySpec{Namespaces: v1alpha1.NamespaceSelector{Names: []string{e.ns}}}}
	if err := e.admin.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.admin.Delete(context.Background(), second) })
	eventually(t, 20*time.Second, "the policy says it conflicts", ready(metav1.ConditionFalse, tenancy.ReasonConflict))
	_, err := e.create(e.pod("two-policies", 1, nil))
	if err == nil || !strings.Contains(err.Error(), "more than one TenantPolicy covers the namespace") {
		t.Errorf("a pod under two policies: %v; want refused", err)
	}
}

// Every placeholder ran as onepool's own Slurm user: Slurm's fair share,
// limits and sacct could not tell teams apart. Now a team's pod's job is
// the team's: its Slurm user, its account, the policy's default QOS.
func TestTrustTenantJobsRunAsTheTeamsSlurmUser(t *testing.T) {
	e := newTeamBEnv(t, 2, 0)
	if _, err := e.create(e.pod("infer", 1, nil)); err != nil {
		t.Fatal(err)
	}
	e.waitBound("infer", 60*time.Second)
	j := e.onlyJob("infer")
	show := scontrolJob(t, e.l, j.ID)
	if !strings.HasPrefix(show["UserId"], lab.TeamB+"(") || show["Account"] != lab.TeamB || show["QOS"] != lab.QOSNormal {
		t.Errorf("job %d: UserId=%s Account=%s QOS=%s; want team-b's user and account, QOS normal", j.ID, show["UserId"], show["Account"], show["QOS"])
	}
	eventually(t, 30*time.Second, "sacct shows the job as team-b's", func() (bool, string) {
		out, err := e.l.Slurm(context.Background(), "sacct", "-n", "-P", "-X", "-j", fmt.Sprint(j.ID), "-o", "User,Account")
		s := strings.TrimSpace(string(out))
		return err == nil && s == lab.TeamB+"|"+lab.TeamB, s
	})
}

// A pod admitted under a policy that allowed QOS high waits (gated) while
// the admin narrows the policy. When it is let go, the scheduler refuses
// it, saying which rule, and submits nothing: admission is not the only
// check.
func TestTrustTenantPolicyNarrowedAfterAdmission(t *testing.T) {
	e := newTeamBEnv(t, 2, 0, lab.QOSNormal, lab.QOSHigh)
	p := e.pod("late", 1, map[string]string{keys.AnnotationJobQOS: lab.QOSHigh})
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "e2e.onepool.dev/hold"}}
	if _, err := e.create(p); err != nil {
		t.Fatalf("QOS high is allowed yet: %v", err)
	}
	ctx := context.Background()
	if err := e.admin.Get(ctx, client.ObjectKeyFromObject(e.policy), e.policy); err != nil {
		t.Fatal(err)
	}
	e.policy.Spec.QOS.Allowed = []string{lab.QOSNormal}
	if err := e.admin.Update(ctx, e.policy); err != nil {
		t.Fatal(err)
	}
	got, err := e.tenant.CoreV1().Pods(e.ns).Get(ctx, "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.SchedulingGates = nil
	if _, err := e.tenant.CoreV1().Pods(e.ns).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the tenant lets its pod go: %v", err)
	}
	want := fmt.Sprintf("refused: TenantPolicy %q does not allow QOS \"high\"", e.policy.Name)
	e.waitPendingWith("late", want, 30*time.Second)
	eventually(t, 10*time.Second, "an event names the rule", func() (bool, string) {
		return e.hasEvent("late", keys.EventPolicyRefused, `does not allow QOS "high"`)
	})
	if js := e.jobs("late"); len(js) != 0 {
		t.Errorf("Slurm has jobs of the refused pod: %v", jobIDs(js))
	}
}

// A team at its policy's GPU cap waits, saying so; when one of its pods
// goes, the next is placed.
func TestTrustTenantGPUCap(t *testing.T) {
	e := newTeamBEnv(t, 1, 2)
	for _, n := range []string{"a", "b", "c"} {
		if _, err := e.create(e.pod(n, 1, nil)); err != nil {
			t.Fatal(err)
		}
		if n != "c" {
			e.waitBound(n, 60*time.Second)
		}
	}
	e.waitPendingWith("c", fmt.Sprintf("waiting for GPUs under TenantPolicy %q: its pods hold 2 of its 2", e.policy.Name), 30*time.Second)
	if err := e.tenant.CoreV1().Pods(e.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitBound("c", 90*time.Second)
}
