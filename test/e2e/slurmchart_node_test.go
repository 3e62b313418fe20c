package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// slurmChart is charts/slurm installed on the lab's real node: a second
// Slurm cluster, all of it pods from the project's images. Cleanup removes
// the release and its namespace (keys, PVCs).
type slurmChart struct {
	t *testing.T
	l *lab.Lab
}

func newSlurmChart(t *testing.T) *slurmChart {
	t.Helper()
	if !lab.RealKubeletEnabled() {
		t.Skipf("the slurm chart's pods need the lab's real node: %s=1 (make e2e-node)", lab.EnvRealKubelet)
	}
	if lab.ChartMode() {
		t.Skipf("the lab runs the onepool chart (%s=chart); this test installs charts itself", lab.EnvComponents)
	}
	s := &slurmChart{t: t, l: lab.Shared(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, s.l.UninstallSlurmChart(ctx), "a leftover slurm release")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := s.l.UninstallSlurmChart(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

// sh runs a shell command in a component's container.
func (s *slurmChart) sh(component, command string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.l.SlurmChartExec(ctx, component, "sh", "-c", command)
	require.NoError(s.t, err)
	return strings.TrimSpace(string(out))
}

// asUser runs command as an ordinary user in the login pod.
func (s *slurmChart) asUser(user, command string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.l.SlurmChartAsUser(ctx, user, command)
	require.NoError(s.t, err)
	return strings.TrimSpace(string(out))
}

// jobField is one squeue/sacct field of a job, seen from the login pod
// ("" when the job is unknown).
func (s *slurmChart) sacctState(job string) string {
	out, _ := s.l.SlurmChartExec(context.Background(), "login", "sacct", "-n", "-X", "-P", "-j", job, "-o", "State,User,NodeList")
	return strings.TrimSpace(string(out))
}

// `helm install charts/slurm` on the real node: slurmctld, slurmrestd,
// slurmdbd + MariaDB, a login pod and a NodeSet's slurmd pod come up as
// containers from the project's images; an ordinary user's sbatch from the
// login pod runs in the jail and sacct shows it; slurmctld's pod deleted
// (what a rolling update does) comes back with the queue from its PVC.
func TestSlurmChartOnTheRealNode(t *testing.T) {
	s := newSlurmChart(t)
	l := s.l
	ctx := context.Background()
	kc, err := l.KubeClient()
	require.NoError(t, err)

	installCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	out, err := l.InstallSlurmChart(installCtx, "--wait", "--timeout", "5m")
	require.NoError(t, err, "%s", out)

	t.Run("every daemon is a pod on the real node from the project's images", func(t *testing.T) {
		pods, err := kc.CoreV1().Pods(lab.SlurmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + lab.SlurmRelease})
		require.NoError(t, err)
		byComponent := map[string]corev1.Pod{}
		for _, p := range pods.Items {
			byComponent[p.Labels["app.kubernetes.io/component"]] = p
		}
		for component, image := range map[string]string{
			"slurmctld": "slurmctld", "slurmrestd": "slurmrestd", "slurmdbd": "slurmdbd",
			"mariadb": "mariadb", "login": "login", "slurmd": "node-agent",
		} {
			p, ok := byComponent[component]
			if !assert.True(t, ok, "no %s pod", component) {
				continue
			}
			assert.Equal(t, corev1.PodRunning, p.Status.Phase, component)
			assert.Equal(t, lab.RealNodeName, p.Spec.NodeName, component)
			assert.Equal(t, "localhost/onepool/"+image+":lab", p.Spec.Containers[0].Image, component)
		}
	})

	t.Run("the NodeSet's slurmd registers and is idle", func(t *testing.T) {
		var states map[string]string
		require.Eventually(t, func() bool {
			states, _ = l.SlurmChartNodeStates(ctx)
			return states[lab.SlurmChartNode] == "idle"
		}, 3*time.Minute, 2*time.Second, "sinfo: %v", states)
		assert.Equal(t, "UP", lastField(s.sh("login", "scontrol ping | grep -o 'is [A-Z]*'")))
	})

	t.Run("the node agent's /metrics: HTTPS, to a metrics reader only", func(t *testing.T) {
		pods, err := kc.CoreV1().Pods(lab.SlurmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=slurmd"})
		require.NoError(t, err)
		require.Len(t, pods.Items, 1)
		url := fmt.Sprintf("https://%s/metrics", net.JoinHostPort(pods.Items[0].Status.PodIP, "8082"))
		code, _, err := lab.GetMetrics(ctx, url, "")
		require.NoError(t, err)
		assert.Equal(t, http.StatusUnauthorized, code, "without a token")
		var body []byte
		require.Eventually(t, func() bool {
			body, err = l.ScrapeMetrics(ctx, url)
			return err == nil
		}, time.Minute, 2*time.Second, "as the metrics reader: %v", err)
		assert.Contains(t, string(body), `onepool_build_info{component="node-agent"`)
		assert.Contains(t, string(body), fmt.Sprintf(`onepool_agent_gpus{slurm_node=%q}`, lab.SlurmChartNode))
	})

	t.Run("an ordinary user's sbatch runs in the jail and sacct shows it", func(t *testing.T) {
		job := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable -o /tmp/jail-%j.out --wrap 'cat "+lab.JailMarker+"; id -un'")
		require.Regexp(t, `^\d+$`, job)
		var state string
		require.Eventually(t, func() bool {
			state = s.sacctState(job)
			return strings.HasPrefix(state, "COMPLETED") || strings.HasPrefix(state, "FAILED")
		}, 2*time.Minute, time.Second, "sacct: %q", state)
		assert.Equal(t, "COMPLETED|"+lab.JailUser+"|"+lab.SlurmChartNode, state)
		// The job's output, on the node where it ran: written from inside the jail.
		got := s.sh("slurmd", "cat /tmp/jail-"+job+".out")
		assert.Contains(t, got, "onepool lab jail", "the step saw the jail's marker")
		assert.Contains(t, got, lab.JailUser)
	})

	t.Run("QOS from values: a high job preempts a normal one, as examples/ say", func(t *testing.T) {
		// The chart's Job made them (ensure-accounting), through slurmrestd.
		qos := map[string]string{}
		for _, line := range strings.Split(s.sh("login", "sacctmgr -n -P show qos format=name,priority,preempt"), "\n") {
			if f := strings.SplitN(line, "|", 3); len(f) == 3 {
				qos[f[0]] = f[1] + "|" + f[2]
			}
		}
		assert.Equal(t, "10|", qos["normal"], "normal: priority|preempts")
		assert.Equal(t, "0|", qos["low"], "low")
		assert.Contains(t, []string{"1000|low,normal", "1000|normal,low"}, qos["high"], "high preempts low and normal")
		assert.Contains(t, s.sh("login", "sacctmgr -n -P show assoc where user="+lab.JailUser+" format=account,qos"), "high",
			"the login user may use the high QOS")

		run := func(q, wrap string) string {
			job := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --exclusive --qos="+q+" -o /dev/null --wrap '"+wrap+"'")
			require.Regexp(t, `^\d+$`, job, "sbatch --qos=%s", q)
			return job
		}
		state := func(job string) string { return s.sh("login", "sacct -n -X -P -j "+job+" -o State") }
		normal := run("normal", "sleep 600")
		var st string
		require.Eventually(t, func() bool { st = state(normal); return st == "RUNNING" }, 2*time.Minute, time.Second, "normal job: %q", st)
		high := run("high", "true")
		require.Eventually(t, func() bool { st = state(high); return st == "COMPLETED" }, 2*time.Minute, time.Second,
			"the high job runs at once, on the node the normal job held: %q", st)
		assert.Equal(t, "PREEMPTED", state(normal), "the normal job was preempted")
	})

	t.Run("a job finds no Kubernetes credential", func(t *testing.T) {
		// What an ordinary user would try: the ServiceAccount token where
		// Kubernetes mounts it, from inside a job (the jail binds /run).
		job := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable -o /tmp/cred-%j.out --wrap '"+
			"for d in /run/secrets/kubernetes.io/serviceaccount /var/run/secrets/kubernetes.io/serviceaccount; do ls -l $d/ 2>&1; head -c 20 $d/token 2>&1; done; echo checked'")
		require.Regexp(t, `^\d+$`, job)
		var state string
		require.Eventually(t, func() bool {
			state = s.sacctState(job)
			return strings.HasPrefix(state, "COMPLETED") || strings.HasPrefix(state, "FAILED")
		}, 2*time.Minute, time.Second, "sacct: %q", state)
		got := s.sh("slurmd", "cat /tmp/cred-"+job+".out")
		assert.Contains(t, got, "checked")
		assert.NotContains(t, got, "ca.crt", "the job listed a ServiceAccount volume:\n%s", got)
		assert.NotContains(t, got, "eyJ", "the job read a ServiceAccount token:\n%s", got)
		assert.Contains(t, s.sh("slurmd", "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true"), "No such file",
			"slurmd's container mounts no token")
	})

	t.Run("slurmctld's pod replaced keeps the queue (state on its PVC)", func(t *testing.T) {
		held := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --hold --wrap true")
		require.Regexp(t, `^\d+$`, held)
		old, err := l.SlurmChartPod(ctx, "slurmctld")
		require.NoError(t, err)
		require.NoError(t, kc.CoreV1().Pods(lab.SlurmNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}))
		var ping string
		require.Eventually(t, func() bool {
			p, err := l.SlurmChartPod(ctx, "slurmctld")
			if err != nil || p.UID == old.UID {
				return false
			}
			out, _ := l.SlurmChartExec(ctx, "login", "scontrol", "ping")
			ping = string(out)
			return strings.Contains(ping, "is UP")
		}, 3*time.Minute, 2*time.Second, "scontrol ping: %s", ping)
		assert.Equal(t, "PENDING", s.sh("login", "squeue -h -j "+held+" -o %T"), "the held job survived the restart")
		next := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --hold --wrap true")
		assert.Greater(t, atoi(t, next), atoi(t, held), "job ids go on from the saved state")
		s.sh("login", fmt.Sprintf("scancel %s %s", held, next))
	})

	t.Run("helm upgrade with a changed value reaches the daemons and keeps the keys", func(t *testing.T) {
		secrets := func() map[string]string {
			out := map[string]string{}
			for _, name := range []string{lab.SlurmRelease + "-munge", lab.SlurmRelease + "-jwt", lab.SlurmRelease + "-db"} {
				sec, err := kc.CoreV1().Secrets(lab.SlurmNamespace).Get(ctx, name, metav1.GetOptions{})
				require.NoError(t, err)
				out[name] = fmt.Sprint(sec.Data)
			}
			return out
		}
		before := secrets()
		held := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --hold --wrap true")
		upCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
		defer cancel()
		out, err := l.InstallSlurmChart(upCtx, "--wait", "--timeout", "5m", "--set", "slurmctld.debug=verbose")
		require.NoError(t, err, "%s", out)
		assert.Equal(t, before, secrets(), "munge, JWT and database keys kept on upgrade")
		var conf string
		require.Eventually(t, func() bool {
			out, _ := l.SlurmChartExec(ctx, "login", "scontrol", "show", "config")
			conf = string(out)
			return regexp.MustCompile(`SlurmctldDebug\s+= verbose`).MatchString(conf)
		}, 3*time.Minute, 2*time.Second, "SlurmctldDebug after the upgrade: %s", conf)
		assert.Equal(t, "PENDING", s.sh("login", "squeue -h -j "+held+" -o %T"), "the queue survives the rolling restart")
		s.sh("login", "scancel "+held)
	})
}

// Node labels of the lab's topology (top first).
const (
	labelSpine = "topology.example.com/spine"
	labelLeaf  = "topology.example.com/leaf"
)

// onepool installed against the slurm chart's Slurm: the onepool chart's
// pods reach slurmrestd through its Service with tokens they mint from that
// Slurm's JWT key; a onepool pod is placed through that Slurm on the node of its
// job, and `kubectl cordon` of the real node drains its Slurm node. Both
// charts run with topology/tree from Node labels: the node without labels
// is in switch "unlabeled" (and runs jobs), and once labelled Slurm shows
// it under its leaf.
func TestSlurmChartWithOnepoolOnTheRealNode(t *testing.T) {
	s := newSlurmChart(t)
	l := s.l
	ctx := context.Background()
	// onepool's release epilog in the chart's slurmd: the onepool chart's
	// scheduler then asks Slurm for allocations granted at once.
	releaseURL := "http://" + lab.ChartRelease + "-scheduler-release." + lab.SystemNamespace + ".svc:10270"
	out, err := l.InstallSlurmChart(ctx, "--wait", "--timeout", "5m", "--set", "topology.enabled=true", "--set", "onepoolRelease.url="+releaseURL)
	require.NoError(t, err, "%s", out)
	c := newChartInstall(t) // registered after the slurm chart: goes first
	// The pod's GPUs come from Slurm through DRA: the chart's webhook
	// turns nvidia.com/gpu into a claim.
	e := newGPUClaimsEnv(t)
	t.Cleanup(func() { quietKubectl(l, "uncordon", lab.RealNodeName) })

	// The admin's step: the slurm chart's JWT key, copied into a Secret
	// of onepool's namespace; onepool mints its own short-lived tokens for
	// SlurmUser from it (no token made by hand, none that expires).
	jwt, err := c.kc.CoreV1().Secrets(lab.SlurmNamespace).Get(ctx, lab.SlurmRelease+"-jwt", metav1.GetOptions{})
	require.NoError(t, err, "the slurm chart's JWT key")
	require.NotEmpty(t, jwt.Data["jwt_hs256.key"])
	const secret = "slurm-chart-jwt-key"
	_, err = c.kc.CoreV1().Secrets(lab.SystemNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: lab.SystemNamespace},
		Data:       map[string][]byte{"jwt_hs256.key": jwt.Data["jwt_hs256.key"]},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.kc.CoreV1().Secrets(lab.SystemNamespace).Delete(context.Background(), secret, metav1.DeleteOptions{})
	})
	out, err = l.InstallChart(ctx, "--set", "slurm.restURL=http://"+lab.SlurmRelease+"-restapi."+lab.SlurmNamespace+".svc:6820",
		"--set", "slurm.tokenSecret.name=", "--set", "slurm.jwtKeySecret.name="+secret, "--set", "slurm.tokenLifetime=10m",
		// Placeholder jobs run in the chart's slurmd pods: they reach the
		// release Service by its cluster name.
		"--set", "scheduler.release.url=", "--set", "scheduler.immediateAllocation=true",
		"--set", "topology.levels={"+labelSpine+","+labelLeaf+"}", "--set", "topology.configMap.namespace="+lab.SlurmNamespace)
	require.NoError(t, err, "%s", out)
	c.waitRolledOut(3 * time.Minute)
	t.Cleanup(func() { quietKubectl(l, "label", "node", lab.RealNodeName, labelSpine+"-", labelLeaf+"-") })
	topologyConf := func() string {
		cm, err := c.kc.CoreV1().ConfigMaps(lab.SlurmNamespace).Get(ctx, lab.SlurmRelease+"-topology", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return cm.Data["topology.conf"]
	}
	eventually(t, time.Minute, "the unlabelled node is in switch unlabeled", func() (bool, string) {
		conf := topologyConf()
		return strings.Contains(conf, "SwitchName=unlabeled Nodes="+lab.SlurmChartNode+"\n"), conf
	})
	// Slurm 24.11 gives no job to a node in no switch: the file must reach
	// slurmctld (the kubelet's ConfigMap sync, then the sidecar's reconfigure).
	eventually(t, 3*time.Minute, "slurmctld has the node in switch unlabeled", func() (bool, string) {
		out, _ := l.SlurmChartExec(ctx, "login", "scontrol", "show", "topology")
		return strings.Contains(string(out), "SwitchName=unlabeled") && strings.Contains(string(out), "Nodes="+lab.SlurmChartNode), string(out)
	})

	// The node's four fake GPUs, as the agent in the chart's slurmd pod
	// publishes them: two types, so GRES index and minor differ.
	cl, err := l.Client()
	require.NoError(t, err)
	devs := nodeSlice(t, cl, lab.SlurmChartNode, lab.NodeFakeGPUs)
	t.Run("the DRA driver's credential writes only its own node's slices", func(t *testing.T) {
		draOnlyOwnNodeSlices(t, s)
	})

	// A Slurm job takes an H100: the index Slurm gives it is one the
	// agent published as an H100 (Slurm's numbering is the agent's).
	gpuJob := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --gres=gpu:nvidia_h100_80gb_hbm3:1 --wrap 'sleep 600'")
	t.Cleanup(func() { _, _ = l.SlurmChartExec(context.Background(), "login", "scancel", gpuJob) })
	var slurmIdx []int
	eventually(t, time.Minute, "the H100 Slurm job runs", func() (bool, string) {
		out := s.sh("login", "scontrol show job -d "+gpuJob)
		if !strings.Contains(out, "JobState=RUNNING") {
			return false, out
		}
		slurmIdx = parseGresIndexes(t, out)
		return true, out
	})
	for _, i := range slurmIdx {
		assert.Equal(t, "nvidia_h100_80gb_hbm3", devs[i].gresType, "GRES index %d Slurm gave an H100 job is published as %+v", i, devs[i])
	}

	// A onepool pod asks two GPUs the usual way; its container lists the
	// GPU devices it can see and the GRES indices its CDI spec names.
	p := e.pod("through-slurm-chart", 2, nil)
	p.Spec.Containers[0].Image = "localhost/onepool/login:lab"
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	p.Spec.Containers[0].Command = []string{"sh", "-c", "echo devices: $(ls " + lab.NodeFakeGPUDir + "); echo gres: $" + "ONEPOOL_GRES_INDEXES; exec sleep 3600"}
	p = e.create(p)
	node := e.waitBound(p.Name, 2*time.Minute)
	assert.Equal(t, lab.SlurmChartNode, node)
	jobs := s.sh("login", "squeue -h -o '%i %T %N %k'")
	assert.Contains(t, jobs, "RUNNING "+lab.SlurmChartNode, "the pod's placeholder job runs in the chart's Slurm: %s", jobs)
	if ok, seen := e.eventSoon(p.Name, keys.EventJobSubmitted, "at once"); !ok {
		t.Errorf("the pod's job was not an allocation granted at once; events: %s", seen)
	}
	assert.Contains(t, s.sh("login", "scontrol show config"), "/etc/slurm/epilog.onepool.d/*", "the chart's slurm.conf runs onepool's release epilog")
	eventually(t, 2*time.Minute, "the pod runs on the real node", func() (bool, string) {
		got, err := e.get(p.Name)
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.PodRunning, string(got.Status.Phase)
	})
	podGPUsAreSlurms(t, s, e, p.Name, devs, slurmIdx)
	s.sh("login", "scancel "+gpuJob) // frees its CPU for the job below

	// Topology from labels: the ConfigMap, then Slurm's own view.
	evs, err := c.kc.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=TopologyLabelMissing,involvedObject.name=" + lab.RealNodeName})
	require.NoError(t, err)
	assert.NotEmpty(t, evs.Items, "a Warning event on the Node says it has no topology labels")
	adminKubectl(t, l, "label", "--overwrite", "node", lab.RealNodeName, labelSpine+"=spine-1", labelLeaf+"=leaf-1")
	eventually(t, time.Minute, "topology.conf follows the labels", func() (bool, string) {
		conf := topologyConf()
		return strings.Contains(conf, "SwitchName=leaf-1 Nodes="+lab.SlurmChartNode+"\n") &&
			strings.Contains(conf, "SwitchName=spine-1 Switches=leaf-1\n"), conf
	})
	eventually(t, 3*time.Minute, "slurmctld reconfigured: scontrol show topology has the leaf", func() (bool, string) {
		out, _ := l.SlurmChartExec(ctx, "login", "scontrol", "show", "topology")
		return strings.Contains(string(out), "SwitchName=leaf-1") && strings.Contains(string(out), "Nodes="+lab.SlurmChartNode), string(out)
	})
	job := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --wrap true")
	eventually(t, time.Minute, "a job runs on the labelled node", func() (bool, string) {
		st := s.sacctState(job)
		return strings.HasPrefix(st, "COMPLETED"), st
	})

	adminKubectl(t, l, "annotate", "--overwrite", "node", lab.RealNodeName, keys.AnnotationCordonReason+"=slurm chart e2e")
	t.Cleanup(func() { quietKubectl(l, "annotate", "node", lab.RealNodeName, keys.AnnotationCordonReason+"-") })
	adminKubectl(t, l, "cordon", lab.RealNodeName)
	eventually(t, time.Minute, "the chart's Slurm drains the cordoned node with onepool's reason", func() (bool, string) {
		out, _ := l.SlurmChartExec(ctx, "login", "scontrol", "show", "node", lab.SlurmChartNode)
		return strings.Contains(string(out), "DRAIN") && strings.Contains(string(out), "onepool: node cordoned: slurm chart e2e"), string(out)
	})
	adminKubectl(t, l, "uncordon", lab.RealNodeName)
	eventually(t, time.Minute, "uncordon resumes it", func() (bool, string) {
		out, _ := l.SlurmChartExec(ctx, "login", "sinfo", "-h", "-N", "-n", lab.SlurmChartNode, "-o", "%T")
		st := strings.TrimSpace(string(out))
		return !strings.Contains(st, "drain"), st
	})

	got, err := e.get(p.Name)
	require.NoError(t, err)
	claimName := podClaimName(got)
	claim, err := e.kc.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	spec := filepath.Join(l.NodeCDIDir(), "onepool.dev-gpu_"+string(claim.UID)+".json")
	assert.FileExists(t, spec, "the agent's CDI spec for the running pod's claim")

	zero := int64(0)
	require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	eventually(t, 90*time.Second, "the pod's placeholder job ends", func() (bool, string) {
		out, _ := l.SlurmChartExec(ctx, "login", "squeue", "-h", "-o", "%i %T")
		return strings.TrimSpace(string(out)) == "", string(out)
	})
	// The kubelet unprepares the claim (the agent drops its CDI spec) and
	// the claim, made for the pod, goes with it.
	eventually(t, 90*time.Second, "the claim's CDI spec is gone and the claim deleted", func() (bool, string) {
		_, statErr := os.Stat(spec)
		_, getErr := e.kc.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimName, metav1.GetOptions{})
		return os.IsNotExist(statErr) && apierrors.IsNotFound(getErr), fmt.Sprintf("spec: %v; claim: %v", statErr, getErr)
	})
}

// podClaimName is the ResourceClaim of the pod's GPUs (onepool's webhook
// names it in the pod; the scheduler made it).
func podClaimName(p *corev1.Pod) string {
	for _, rc := range p.Status.ResourceClaimStatuses {
		if rc.Name == keys.PodClaimGPUs && rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.Name == keys.PodClaimGPUs && rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName
		}
	}
	return ""
}

// podGPUsAreSlurms checks what a user running a pod on GPUs Slurm gave
// would check: the pod's job holds GRES indices no Slurm job holds, the
// claim is allocated exactly the published devices of those indices, and
// the container sees exactly those device files (the real kubelet asked
// the agent, containerd injected its CDI spec), told their GRES indices.
func podGPUsAreSlurms(t *testing.T, s *slurmChart, e *schedEnv, pod string, devs []draDevice, taken []int) {
	t.Helper()
	p := e.withJobID(pod)
	id := p.Annotations[keys.AnnotationJobID]
	require.NotEmpty(t, id, "pod %s has no job id", pod)
	idx := parseGresIndexes(t, s.sh("login", "scontrol show job -d "+id))
	for _, i := range idx {
		assert.NotContains(t, taken, i, "GRES index %d given to the pod's job %s and to a Slurm job", i, id)
	}
	claim, err := e.kc.ResourceV1().ResourceClaims(e.ns).Get(context.Background(), podClaimName(p), metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, claim.Status.Allocation, "claim %s not allocated", claim.Name)
	byName := map[string]draDevice{}
	for _, d := range devs {
		byName[d.name] = d
	}
	var gotIdx []int
	var want []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		gotIdx = append(gotIdx, byName[r.Device].gresIndex)
		want = append(want, fmt.Sprintf("nvidia%d", byName[r.Device].minor))
	}
	assert.Equal(t, idx, gotIdx, "the claim's devices are the GRES indices of job %s", id)
	sort.Strings(want)
	var logs string
	eventually(t, time.Minute, "the container printed its devices", func() (bool, string) {
		logs = adminKubectl(t, e.l, "logs", "-n", e.ns, pod)
		return strings.Contains(logs, "gres:"), logs
	})
	t.Logf("pod %s: job %s has GRES %v (a Slurm job holds %v); the claim holds %v; the container says: %s", pod, id, idx, taken, want, strings.TrimSpace(logs))
	assert.Contains(t, logs, "devices: "+strings.Join(want, " ")+"\n", "the container sees exactly the devices of GRES %v", idx)
	var idxs []string
	for _, i := range idx {
		idxs = append(idxs, strconv.Itoa(i))
	}
	assert.Contains(t, logs, "gres: "+strings.Join(idxs, ",")+"\n")
}

// quietKubectl is kubectl for cleanups: errors are not the test's.
func quietKubectl(l *lab.Lab, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = osexec.CommandContext(ctx, l.Kubectl(), append([]string{"--kubeconfig", l.Kubeconfig()}, args...)...).Run()
}

func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err, "%q", s)
	return n
}

// A prolog that exits non-zero: Slurm drains the node with its own reason
// and requeues the job held; nothing is lost.
func TestSlurmChartFailingPrologDrainsWithSlurmsReason(t *testing.T) {
	s := newSlurmChart(t)
	values := filepath.Join(t.TempDir(), "prolog.yaml")
	require.NoError(t, os.WriteFile(values, []byte(`prolog:
  scripts:
    check-gpus: |
      #!/bin/sh
      echo "no GPU driver" >&2
      exit 1
`), 0o644))
	out, err := s.l.InstallSlurmChart(context.Background(), "--wait", "--timeout", "5m", "-f", values)
	require.NoError(t, err, "%s", out)
	job := s.asUser(lab.JailUser, "cd /tmp && sbatch --parsable --wrap true")
	var sinfo string
	eventually(t, time.Minute, "slurmd drains the node: Prolog error", func() (bool, string) {
		sinfo = s.sh("login", "sinfo -h -N -n "+lab.SlurmChartNode+" -o '%T|%E'")
		return strings.HasPrefix(sinfo, "drain") && strings.HasSuffix(sinfo, "|Prolog error"), sinfo
	})
	eventually(t, time.Minute, "the job is requeued and held, not lost", func() (bool, string) {
		st := s.sh("login", "squeue -h -j "+job+" -o '%T|%r'")
		return st == "PENDING|launch failed requeued held", st
	})
}
