package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// chartInstall is the chart installed for real: `helm install` with the
// lab's values, the controller manager and the scheduler as pods from
// onepool's images on the lab's real kubelet node, as the chart's
// ServiceAccounts. Cleanup uninstalls it and gives the lab its own
// processes back.
type chartInstall struct {
	t  *testing.T
	l  *lab.Lab
	kc kubernetes.Interface
}

func newChartInstall(t *testing.T) *chartInstall {
	t.Helper()
	if !lab.RealKubeletEnabled() {
		t.Skipf("the chart's pods need the lab's real node: %s=1 (make e2e-node)", lab.EnvRealKubelet)
	}
	if lab.ChartMode() {
		t.Skipf("the lab runs the chart already (%s=chart); these tests install and uninstall it themselves", lab.EnvComponents)
	}
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	require.NoError(t, err)
	c := &chartInstall{t: t, l: l, kc: kc}
	t.Cleanup(c.cleanup)
	return c
}

func (c *chartInstall) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.l.Helm(ctx, "status", lab.ChartRelease, "-n", lab.SystemNamespace); err == nil && len(out) > 0 {
		if out, err := c.l.UninstallChart(ctx); err != nil {
			c.t.Errorf("cleanup: helm uninstall: %v: %s", err, out)
		}
	}
	if err := c.l.RestoreProcesses(ctx); err != nil {
		c.t.Errorf("cleanup: the lab's own components: %v", err)
	}
}

// install runs helm upgrade --install with extra arguments.
func (c *chartInstall) install(extra ...string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.l.InstallChart(ctx, extra...)
	require.NoError(c.t, err, "%s", out)
}

func (c *chartInstall) upgrade(extra ...string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.l.HelmUpgrade(ctx, extra...)
	require.NoError(c.t, err, "%s", out)
}

// pods are the live pods of a chart Deployment.
func (c *chartInstall) pods(deploy string) []corev1.Pod {
	c.t.Helper()
	pods, err := charts.Pods(context.Background(), c.kc, deploy)
	require.NoError(c.t, err)
	return pods
}

// waitRolledOut waits until every replica of both Deployments is updated,
// available and Ready, and no old pod is left.
func (c *chartInstall) waitRolledOut(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	eventually(c.t, timeout, "the chart's Deployments rolled out", func() (bool, string) {
		done, state := charts.RolledOut(context.Background(), c.kc)
		if !done && time.Now().After(deadline) {
			state += charts.PodLogs(context.Background(), c.kc)
		}
		return done, state
	})
}

// waitStarted waits until each chart Deployment has its replicas as pods
// whose containers all run, Ready or not: with Slurm unreachable the
// controller manager's leader is rightly not Ready (its cache is stale a
// few seconds after it wins the lease), so "rolled out" may never hold.
func (c *chartInstall) waitStarted(timeout time.Duration) {
	c.t.Helper()
	eventually(c.t, timeout, "the chart's pods started", func() (bool, string) {
		var states []string
		done := true
		for _, name := range charts.Deployments {
			d, err := c.kc.AppsV1().Deployments(lab.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			pods, err := charts.Pods(context.Background(), c.kc, name)
			if err != nil {
				return false, err.Error()
			}
			running := 0
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning && allContainersRunning(p) {
					running++
				}
			}
			done = done && running == int(*d.Spec.Replicas) && len(pods) == running
			states = append(states, name+": "+charts.PodStates(pods))
		}
		return done, strings.Join(states, " | ")
	})
}

func allContainersRunning(p corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// waitLeaderIsPod waits until a pod of deploy holds lease and returns it.
func (c *chartInstall) waitLeaderIsPod(deploy, lease string, timeout time.Duration) string {
	c.t.Helper()
	leader := ""
	eventually(c.t, timeout, "a pod of "+deploy+" holds lease "+lease, func() (bool, string) {
		var err error
		leader, err = charts.Leader(context.Background(), c.kc, deploy, lease)
		if err != nil {
			return false, err.Error()
		}
		return leader != "", "no pod of " + deploy + " holds it"
	})
	return leader
}

// leftovers lists every object of the release still in the cluster, by
// kind, except CRDs (kept by design).
func (c *chartInstall) leftovers(ctx context.Context) []string {
	sel := metav1.ListOptions{LabelSelector: charts.InstanceSelector}
	ns := lab.SystemNamespace
	var left []string
	add := func(kind string, n int, err error) {
		if err != nil {
			left = append(left, kind+": "+err.Error())
		} else if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, kind))
		}
	}
	deps, err := c.kc.AppsV1().Deployments(ns).List(ctx, sel)
	add("Deployments", len(deps.Items), err)
	rss, err := c.kc.AppsV1().ReplicaSets(ns).List(ctx, sel)
	add("ReplicaSets", len(rss.Items), err)
	pods, err := c.kc.CoreV1().Pods(ns).List(ctx, sel)
	add("Pods", len(pods.Items), err)
	svcs, err := c.kc.CoreV1().Services(ns).List(ctx, sel)
	add("Services", len(svcs.Items), err)
	cms, err := c.kc.CoreV1().ConfigMaps(ns).List(ctx, sel)
	add("ConfigMaps", len(cms.Items), err)
	sas, err := c.kc.CoreV1().ServiceAccounts(ns).List(ctx, sel)
	add("ServiceAccounts", len(sas.Items), err)
	pdbs, err := c.kc.PolicyV1().PodDisruptionBudgets(ns).List(ctx, sel)
	add("PodDisruptionBudgets", len(pdbs.Items), err)
	for _, rns := range []string{ns, "kube-system"} {
		roles, err := c.kc.RbacV1().Roles(rns).List(ctx, sel)
		add("Roles in "+rns, len(roles.Items), err)
		rbs, err := c.kc.RbacV1().RoleBindings(rns).List(ctx, sel)
		add("RoleBindings in "+rns, len(rbs.Items), err)
	}
	crs, err := c.kc.RbacV1().ClusterRoles().List(ctx, sel)
	add("ClusterRoles", len(crs.Items), err)
	crbs, err := c.kc.RbacV1().ClusterRoleBindings().List(ctx, sel)
	add("ClusterRoleBindings", len(crbs.Items), err)
	return left
}

// TestChartInstallUpgradeUninstallOnTheRealNode installs charts/onepool
// with helm as a platform team would: the components come up as pods from
// onepool's images on the real node, take their leases, and the chart's
// scheduler places a onepool pod through Slurm; a bad upgrade (a token
// Secret that does not exist) leaves the running replicas serving; a good
// upgrade rolls both Deployments; helm uninstall leaves nothing but the
// CRDs, and no Slurm job of the release's pods.
func TestChartInstallUpgradeUninstallOnTheRealNode(t *testing.T) {
	c := newChartInstall(t)
	e := newSchedEnv(t)
	start := time.Now()
	c.install()
	c.waitRolledOut(3 * time.Minute)
	t.Logf("helm install → both Deployments rolled out (2+2 Ready pods): %s", time.Since(start).Round(100*time.Millisecond))

	for _, name := range charts.Deployments {
		for _, p := range c.pods(name) {
			assert.Equal(t, lab.RealNodeName, p.Spec.NodeName, "pod %s", p.Name)
			assert.Equal(t, name, p.Spec.ServiceAccountName, "pod %s runs as its component's ServiceAccount", p.Name)
			assert.Contains(t, p.Spec.Containers[0].Image, "localhost/onepool/", "pod %s: image from make images", p.Name)
			require.NotNil(t, p.Spec.SecurityContext)
			require.NotNil(t, p.Spec.SecurityContext.RunAsNonRoot)
			assert.True(t, *p.Spec.SecurityContext.RunAsNonRoot, "pod %s runs as non-root", p.Name)
		}
	}
	cmLeader := c.waitLeaderIsPod(charts.Deployments[0], charts.Leases[0], time.Minute)
	schedLeader := c.waitLeaderIsPod(charts.Deployments[1], lab.SchedulerLease, time.Minute)
	t.Logf("leaders: %s, %s", cmLeader, schedLeader)

	// The chart's scheduler places a pod through Slurm.
	e.create(e.pod("first", 1, nil))
	node := e.waitBound("first", 90*time.Second)
	t.Logf("helm install → first onepool pod bound via Slurm: %s (node %s)", time.Since(start).Round(100*time.Millisecond), node)
	job := e.onlyJob("first")
	assert.Contains(t, job.Nodes, node, "the pod is bound where Slurm runs its placeholder job %d", job.ID)

	// A bad upgrade: the new pods cannot start (their token Secret does
	// not exist); the old replicas keep serving.
	c.upgrade("--set", "slurm.tokenSecret.name=no-such-token")
	eventually(t, 90*time.Second, "the kubelet says the Secret is missing", func() (bool, string) {
		evs, err := c.kc.CoreV1().Events(lab.SystemNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=FailedMount"})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, `"no-such-token" not found`) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d FailedMount events", len(evs.Items))
	})
	e.create(e.pod("during-bad-upgrade", 1, nil))
	e.waitBound("during-bad-upgrade", 90*time.Second)
	for _, name := range charts.Deployments {
		d, err := c.kc.AppsV1().Deployments(lab.SystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.GreaterOrEqual(t, d.Status.AvailableReplicas, int32(1), "%s keeps an available replica during a bad upgrade: %s", name, charts.PodStates(c.pods(name)))
	}

	// A good upgrade with a changed value rolls both Deployments.
	before := c.replicaSets()
	c.upgrade("--set", "scheduler.logLevel=3", "--set", "controllerManager.logLevel=1")
	c.waitRolledOut(3 * time.Minute)
	after := c.replicaSets()
	for _, name := range charts.Deployments {
		assert.NotEqual(t, before[name], after[name], "%s rolled to a new ReplicaSet", name)
	}
	c.waitLeaderIsPod(charts.Deployments[1], lab.SchedulerLease, time.Minute)
	e.create(e.pod("after-upgrade", 1, nil))
	e.waitBound("after-upgrade", 90*time.Second)

	// Deleting the pods releases their jobs through the chart's release
	// Service (Slurm's nodes reach it through the lab's Service stand-in).
	zero := int64(0)
	require.NoError(t, e.kc.CoreV1().Pods(e.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}))
	eventually(t, 90*time.Second, "the pods' placeholder jobs end", func() (bool, string) {
		a := e.activeJobs("")
		return len(a) == 0, fmt.Sprint(jobIDs(a))
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.l.UninstallChart(ctx)
	require.NoError(t, err, "%s", out)
	eventually(t, 2*time.Minute, "nothing of the release is left", func() (bool, string) {
		left := c.leftovers(ctx)
		return len(left) == 0, strings.Join(left, ", ")
	})
	_, err = c.kc.CoreV1().Secrets(lab.SystemNamespace).Get(ctx, lab.ChartTokenSecret, metav1.GetOptions{})
	assert.NoError(t, err, "the token Secret was the admin's, not the chart's: it stays")
	res, err := c.kc.Discovery().ServerResourcesForGroupVersion("onepool.dev/v1alpha1")
	require.NoError(t, err, "the NodeSet CRD stays after helm uninstall (Helm never deletes CRDs)")
	var kinds []string
	for _, r := range res.APIResources {
		kinds = append(kinds, r.Kind)
	}
	assert.Contains(t, kinds, "NodeSet")
}

// replicaSets maps each chart Deployment to its newest ReplicaSet.
func (c *chartInstall) replicaSets() map[string]string {
	c.t.Helper()
	l, err := c.kc.AppsV1().ReplicaSets(lab.SystemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: charts.InstanceSelector})
	require.NoError(c.t, err)
	out := map[string]string{}
	newest := map[string]*appsv1.ReplicaSet{}
	for i := range l.Items {
		rs := &l.Items[i]
		for _, o := range rs.OwnerReferences {
			if cur := newest[o.Name]; cur == nil || rs.CreationTimestamp.After(cur.CreationTimestamp.Time) {
				newest[o.Name] = rs
			}
		}
	}
	for d, rs := range newest {
		out[d] = rs.Name
	}
	return out
}

// TestChartUnreachableSlurmrestd installs the chart with a slurmrestd URL
// nothing answers: the components stay up (no restart), the controller
// manager's leader says it is not ready, a onepool pod waits with a message
// naming Slurm, and a cordoned Node's Slurm node is not touched. An upgrade
// to the right URL brings placement and drains back.
func TestChartUnreachableSlurmrestd(t *testing.T) {
	c := newChartInstall(t)
	e := newSchedEnv(t)
	// A slurmd pod the syncer knows, made while the lab's own components run.
	s := newSyncerEnv(t, c.l.NodeNames()[0])

	c.install("--set", fmt.Sprintf("slurm.restURL=http://%s:1", lab.SlurmRESTServiceIP), "--set", "slurm.staleAfter=5s")
	c.waitStarted(3 * time.Minute)
	cm := c.waitLeaderIsPod(charts.Deployments[0], charts.Leases[0], time.Minute)
	eventually(t, time.Minute, "the controller manager's leader "+cm+" not Ready", func() (bool, string) {
		p, err := c.kc.CoreV1().Pods(lab.SystemNamespace).Get(context.Background(), cm, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !podReady(p), charts.PodStates([]corev1.Pod{*p})
	})
	e.create(e.pod("waits", 1, nil))
	e.waitPendingWith("waits", "Slurm", time.Minute)

	s.kubectl("annotate", "--overwrite", "node", s.node, keys.AnnotationCordonReason+"=maintenance while slurmrestd is away")
	s.kubectl("cordon", s.node)
	s.holds(10*time.Second, "no drain while Slurm is unknown, pod not bound", func() (bool, string) {
		kv := scontrolNode(t, c.l, s.node)
		p, err := e.get("waits")
		if err != nil {
			return false, err.Error()
		}
		return !strings.Contains(kv["State"], "DRAIN") && p.Spec.NodeName == "", kv["State"] + " " + kv["Reason"] + "; pod on " + p.Spec.NodeName
	})
	for _, name := range charts.Deployments {
		for _, p := range c.pods(name) {
			for _, cs := range p.Status.ContainerStatuses {
				assert.Zero(t, cs.RestartCount, "pod %s restarted: an unreachable slurmrestd is not a crash", p.Name)
			}
		}
	}

	c.upgrade("--set", "slurm.staleAfter=5s")
	c.waitRolledOut(3 * time.Minute)
	e.waitBound("waits", 2*time.Minute)
	s.waitSlurm(time.Minute, true, "onepool")
}
