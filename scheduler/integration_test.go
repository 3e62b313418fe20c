package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	kubeschedv1 "k8s.io/kube-scheduler/config/v1"
	kubesched "k8s.io/kubernetes/pkg/scheduler"
	kubeconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubescheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// The integration suite: kube-scheduler's framework in process (as
// scheduler-plugins' integration tests run it) with the Onepool plugin
// built by its real Factory, against a real kube-apiserver and etcd
// (envtest, the lab's binaries through KUBEBUILDER_ASSETS, which `make
// unit` sets) and a Slurm whose every answer is a recorded slurmrestd
// answer (fakeSlurmrestd). It checks what a user would: what was asked of
// Slurm, and the pods, events and nodes the API server holds.

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// itEnv is the suite's scheduler, API server and Slurm.
type itEnv struct {
	kc      kubernetes.Interface
	dyn     dynamic.Interface
	slurm   *fakeSlurmrestd
	release string // the release endpoint, http://host:port
}

func TestIntegrationScheduler(t *testing.T) {
	env := testenv.Start(t, filepath.Join("..", "config", "crd", "bases"))
	s := startIntegration(t, env.Config)

	t.Run("a job Slurm refuses leaves the pod pending with the reason until its ask changes", func(t *testing.T) {
		// Not parallel: any TenantPolicy made, changed or deleted places
		// every pending pod again, Slurm's refusals forgotten (the policy
		// may change what the pod asks), and the other cases make theirs.
		e := s.namespace(t, "rejected", v1alpha1.TenantPolicySpec{QOS: v1alpha1.Choice{Allowed: []string{"*"}}}, 1)
		qos := e.ns + "-gold"
		s.slurm.does().refuseQOS(qos)
		// The scheduler has seen the namespace and its policy once a pod
		// there is submitted: their own arrival wakes nothing later.
		e.createPod("canary", 1, "", "", nil, nil)
		e.submitted("canary")
		e.createPod("vip", 1, "", "", map[string]string{keys.AnnotationJobQOS: qos}, nil)
		e.event("vip", keys.EventJobRejected, fmt.Sprintf("QOS %q does not exist or the account may not use it (from annotation %s)", qos, keys.AnnotationJobQOS))
		e.unschedulable("vip", "Slurm rejected the placeholder job")
		assert.Len(t, s.slurm.asked().asksFor("onepool/"+e.ns+"/vip"), 1, "a refusal is not asked again unchanged")

		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"standard"}}}`, keys.AnnotationJobQOS)
		_, err := e.kc.CoreV1().Pods(e.ns).Patch(context.Background(), "vip", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		job := "onepool/" + e.ns + "/vip"
		e.eventually("the pod is submitted again with its new QOS", func() (bool, string) {
			asks := s.slurm.asked().asksFor(job)
			last := asks[len(asks)-1]
			return last.ID != 0 && last.Job.QOS == "standard", fmt.Sprintf("%+v", asks)
		})
		asks := s.slurm.asked().asksFor(job)
		assert.Zero(t, asks[0].ID, "Slurm made no job of the refused ask")
		for _, a := range asks[1:] {
			assert.Equal(t, "standard", a.Job.QOS, "after the refusal, only the new ask: %+v", asks)
		}
	})

	t.Run("a pod waits in Slurm's queue, binds where its job runs, and goes when Slurm preempts the job", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "queued", v1alpha1.TenantPolicySpec{SlurmUser: "team-a"}, 1)
		pod := e.createPod("llama", 1, "1500m", "1Gi", nil, nil)
		ask := e.submitted("llama")
		id := ask.ID
		assert.Equal(t, "onepool/"+e.ns+"/llama", ask.Job.Name, "squeue shows the pod")
		assert.True(t, strings.HasPrefix(ask.Job.Comment, fmt.Sprintf("onepool:pod=%s/llama;uid=%s;user=team-a;sig=", e.ns, pod.UID)),
			"the comment names the pod, its uid and the Slurm user, signed: %q", ask.Job.Comment)
		assert.Equal(t, "team-a", ask.User, "the job runs as the TenantPolicy's Slurm user")
		assert.Equal(t, "gres/gpu:1", ask.Job.TresPerNode)
		assert.Equal(t, 2, ask.Job.CPUsPerTask, "1500m CPUs, rounded up")
		assert.Equal(t, int64(1024), ask.Job.MemoryPerNode.Number, "1Gi in MiB")
		assert.Equal(t, "main", ask.Job.Partition, "the scheduler's defaultPartition")
		assert.Equal(t, int64(60), ask.Job.TimeLimit.Number, "defaultTimeLimit 1h, in minutes")
		assert.Equal(t, "1", ask.Job.Nodes)
		assert.Equal(t, 1, ask.Job.Tasks)
		assert.Contains(t, ask.Job.Script, "holds this allocation until the pod is gone")

		e.eventually("the job id is written on the pod", func() (bool, string) {
			p := e.get("llama")
			return p != nil && p.Annotations[keys.AnnotationJobID] == itoa(id), fmt.Sprint(p.Annotations)
		})
		e.unschedulable("llama", fmt.Sprintf("waiting in Slurm's queue: job %d is PENDING (Resources)", id))
		assert.Equal(t, http.StatusConflict, s.releaseAnswer(t, id), "the placeholder script keeps holding while the pod exists")

		node := e.node(0)
		s.slurm.does().start(id, node)
		assert.Equal(t, node, e.bound("llama"), "bound to the node of the job's Slurm node")

		s.slurm.does().preempt(id, 30*time.Second)
		e.event("llama", keys.EventJobPreempted, fmt.Sprintf("Slurm began preempting job %d", id))
		p := e.terminating("llama")
		require.NotNil(t, p.DeletionGracePeriodSeconds)
		assert.LessOrEqual(t, *p.DeletionGracePeriodSeconds, int64(28), "the pod's own 60 s grace cut to end 2 s before Slurm's deadline")
		assert.False(t, s.slurm.asked().cancelled(id), "the job is kept while its pod stops")
		assert.Equal(t, http.StatusConflict, s.releaseAnswer(t, id))

		e.forceDelete("llama") // what the kubelet does once the containers stopped
		e.eventually("the job is cancelled once its pod is gone, so the preemptor gets the GPUs then", func() (bool, string) {
			return s.slurm.asked().cancelled(id), s.slurm.asked().state(id)
		})
		e.eventually("the release endpoint lets the placeholder go", func() (bool, string) {
			code := s.releaseAnswer(t, id)
			return code == http.StatusOK, fmt.Sprint(code)
		})
	})

	t.Run("a job that ends evicts its pod and is not cancelled again", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "ended", v1alpha1.TenantPolicySpec{}, 1)
		pod := e.createPod("short", 1, "", "", nil, nil)
		ask := e.submitted("short")
		assert.True(t, strings.HasPrefix(ask.Job.Comment, fmt.Sprintf("onepool:pod=%s/short;uid=%s;user=%s;sig=", e.ns, pod.UID, tokenUser)),
			"without a Slurm user in the policy, the job runs as the token's user: %q", ask.Job.Comment)
		assert.Empty(t, ask.User)
		s.slurm.does().start(ask.ID, e.node(0))
		assert.Equal(t, e.node(0), e.bound("short"))

		s.slurm.does().end(ask.ID, "TIMEOUT")
		e.event("short", keys.EventJobEnded, fmt.Sprintf("Slurm job %d ended (TIMEOUT", ask.ID))
		e.terminating("short")
		e.forceDelete("short")
		e.eventually("the placement is dropped once the pod is gone", func() (bool, string) {
			code := s.releaseAnswer(t, ask.ID)
			return code == http.StatusOK, fmt.Sprint(code)
		})
		assert.False(t, s.slurm.asked().cancelled(ask.ID), "a job Slurm ended is not cancelled")
	})

	t.Run("a pod deleted while its job waits has the job cancelled", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "deleted", v1alpha1.TenantPolicySpec{}, 1)
		e.createPod("gone", 1, "", "", nil, nil)
		id := e.submitted("gone").ID
		e.eventually("the job id is written on the pod", func() (bool, string) {
			p := e.get("gone")
			return p != nil && p.Annotations[keys.AnnotationJobID] == itoa(id), fmt.Sprint(p)
		})
		require.NoError(t, e.kc.CoreV1().Pods(e.ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}))
		e.eventually("the pending job is cancelled", func() (bool, string) {
			return s.slurm.asked().cancelled(id) && s.slurm.asked().state(id) == "CANCELLED", s.slurm.asked().state(id)
		})
		assert.Len(t, s.slurm.asked().submitsFor("onepool/"+e.ns+"/gone"), 1, "one job for the pod, never a second")
	})

	t.Run("an allocation Slurm grants at once binds the pod to the Node that names the Slurm node", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "now", v1alpha1.TenantPolicySpec{Partitions: v1alpha1.Choice{Allowed: []string{"fast"}, Default: "fast"}}, 0)
		slurmName, kubeName := e.ns+"-slurm", e.ns+"-k8s"
		e.createNode(kubeName, map[string]string{keys.LabelSlurmNodeName: slurmName})
		s.slurm.does().grantIn("fast", slurmName)
		e.createPod("now", 2, "", "", nil, nil)
		assert.Equal(t, kubeName, e.bound("now"), "the Node labelled with the Slurm node's name")
		asks := s.slurm.asked().asksFor("onepool/" + e.ns + "/now")
		require.Len(t, asks, 1, "one allocation and no batch job: %+v", asks)
		assert.Equal(t, "/job/allocate", asks[0].Path)
		assert.True(t, asks[0].Job.Immediate)
		assert.Empty(t, asks[0].Job.Script, "an allocation runs no script")
		assert.Equal(t, "fast", asks[0].Job.Partition, "the policy's default partition")
		assert.Equal(t, "gres/gpu:2", asks[0].Job.TresPerNode)
		e.event("now", keys.EventJobSubmitted, fmt.Sprintf("Slurm granted job %d at once", asks[0].ID))
		e.eventually("the job id is written on the pod", func() (bool, string) {
			p := e.get("now")
			return p != nil && p.Annotations[keys.AnnotationJobID] == itoa(asks[0].ID), fmt.Sprint(p.Annotations)
		})
	})

	t.Run("a pod its TenantPolicy refuses is not submitted and says why", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "refused", v1alpha1.TenantPolicySpec{QOS: v1alpha1.Choice{Allowed: []string{"standard"}}}, 1)
		e.createPod("greedy", 1, "", "", map[string]string{keys.AnnotationJobQOS: "gold"}, nil)
		e.event("greedy", keys.EventPolicyRefused, `"gold"`)
		e.unschedulable("greedy", "refused")
		// A pod the policy allows goes through meanwhile.
		e.createPod("modest", 1, "", "", map[string]string{keys.AnnotationJobQOS: "standard"}, nil)
		assert.Equal(t, "standard", e.submitted("modest").Job.QOS)
		assert.Empty(t, s.slurm.asked().asksFor("onepool/"+e.ns+"/greedy"), "nothing asked of Slurm for a refused pod")
	})

	t.Run("a pod with an invalid annotation stays pending until the annotation is fixed", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "invalid", v1alpha1.TenantPolicySpec{}, 1)
		e.createPod("typo", 1, "", "", map[string]string{keys.AnnotationJobTimeLimit: "soon"}, nil)
		e.event("typo", keys.EventInvalidRequest, keys.AnnotationJobTimeLimit)
		e.unschedulable("typo", "invalid Slurm request")
		assert.Empty(t, s.slurm.asked().asksFor("onepool/"+e.ns+"/typo"))
		assert.Empty(t, e.get("typo").Spec.NodeName)

		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2h"}}}`, keys.AnnotationJobTimeLimit)
		_, err := e.kc.CoreV1().Pods(e.ns).Patch(context.Background(), "typo", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		ask := e.submitted("typo")
		assert.Equal(t, int64(120), ask.Job.TimeLimit.Number, "the fixed time limit, in minutes")
	})

	t.Run("a pod's node selector reaches Slurm as the nodes its job leaves out", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "selector", v1alpha1.TenantPolicySpec{}, 2)
		patch := fmt.Sprintf(`{"metadata":{"labels":{"zone":%q}}}`, e.ns)
		_, err := e.kc.CoreV1().Nodes().Patch(context.Background(), e.node(1), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		// Slurm's node names, read for another test a moment ago, are
		// read again for a node they lack after slurmNodeNamesMiss.
		time.Sleep(slurmNodeNamesMiss + 100*time.Millisecond)
		pod := podWith(nil, 1, "", "")
		pod.Name, pod.Namespace, pod.UID = "picky", e.ns, ""
		pod.Spec.SchedulerName = keys.SchedulerName
		pod.Spec.NodeSelector = map[string]string{"zone": e.ns}
		pod.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
		_, err = e.kc.CoreV1().Pods(e.ns).Create(context.Background(), pod, metav1.CreateOptions{})
		require.NoError(t, err)
		ask := e.submitted("picky")
		assert.Contains(t, ask.Job.ExcludedNodes, e.node(0))
		assert.NotContains(t, ask.Job.ExcludedNodes, e.node(1))
		// While the job waits, the other node is labelled for the pod too:
		// Slurm is told the job may use it now.
		_, err = e.kc.CoreV1().Nodes().Patch(context.Background(), e.node(0), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		e.eventually("the waiting job no longer leaves out "+e.node(0), func() (bool, string) {
			ex := s.slurm.asked().excluded(ask.ID)
			return !slices.Contains(ex, e.node(0)) && !slices.Contains(ex, e.node(1)) && len(s.slurm.asked().updatesOf(ask.ID)) > 0, fmt.Sprint(ex)
		})
		s.slurm.does().start(ask.ID, e.node(1))
		e.eventually("picky bound to "+e.node(1), func() (bool, string) {
			p := e.get("picky")
			return p != nil && p.Spec.NodeName == e.node(1), fmt.Sprintf("%v", p != nil && p.Spec.NodeName != "")
		})
	})

	t.Run("a pod's bound volume reaches Slurm as the nodes its job leaves out", func(t *testing.T) { itBoundVolume(t, s) })
	t.Run("a job Slurm starts on a cordoned node is given back and another asked for", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "cordon", v1alpha1.TenantPolicySpec{}, 2)
		e.cordon(e.node(0))
		e.createPod("moved", 1, "", "", nil, nil)
		first := e.submitted("moved").ID
		s.slurm.does().start(first, e.node(0)) // the drain had not reached Slurm yet
		e.eventually("the job on the cordoned node is cancelled", func() (bool, string) {
			return s.slurm.asked().cancelled(first), s.slurm.asked().state(first)
		})
		job := "onepool/" + e.ns + "/moved"
		e.eventually("a new job is asked for", func() (bool, string) {
			return len(s.slurm.asked().submitsFor(job)) == 2, fmt.Sprintf("%+v", s.slurm.asked().submitsFor(job))
		})
		second := s.slurm.asked().submitsFor(job)[1].ID
		s.slurm.does().start(second, e.node(1))
		assert.Equal(t, e.node(1), e.bound("moved"))
		assert.Len(t, s.slurm.asked().submitsFor(job), 2)
	})

	t.Run("a gang gets one job over as many nodes as its PodGroup's minMember, a node each", func(t *testing.T) {
		t.Parallel()
		e := s.namespace(t, "gang", v1alpha1.TenantPolicySpec{}, 2)
		pg := e.createPodGroup("pair", 2)
		member := map[string]string{keys.LabelPodGroup: "pair"}
		e.createPod("pair-0", 4, "", "", nil, member)
		e.unschedulable("pair-0", "1 of its 2 pods exist")
		assert.Empty(t, s.slurm.asked().asksFor("onepool/"+e.ns+"/pair"), "no job for an incomplete gang")

		e.createPod("pair-1", 4, "", "", nil, member)
		ask := e.submitted("pair")
		assert.Equal(t, "2", ask.Job.Nodes)
		assert.Equal(t, 2, ask.Job.Tasks)
		assert.Equal(t, "gres/gpu:4", ask.Job.TresPerNode, "each pod's GPUs, per node")
		assert.True(t, strings.HasPrefix(ask.Job.Comment, fmt.Sprintf("onepool:group=%s/pair;uid=%s;", e.ns, pg.GetUID())),
			"the comment names the PodGroup by its uid: %q", ask.Job.Comment)

		s.slurm.does().start(ask.ID, e.node(0), e.node(1))
		got := []string{e.bound("pair-0"), e.bound("pair-1")}
		slices.Sort(got)
		assert.Equal(t, []string{e.node(0), e.node(1)}, got, "each pod on its own node of the job")
		assert.Len(t, s.slurm.asked().submitsFor("onepool/"+e.ns+"/pair"), 1, "one job for the gang")
		for _, name := range []string{"pair-0", "pair-1"} {
			e.eventually(name+" records the gang's job", func() (bool, string) {
				p := e.get(name)
				return p != nil && p.Annotations[keys.AnnotationJobID] == itoa(ask.ID), fmt.Sprint(p.Annotations)
			})
		}
	})

	t.Cleanup(func() {
		assert.Empty(t, s.slurm.asked().unserved(), "requests the recorded slurmrestd answers do not cover")
	})
}

// startIntegration starts the fake Slurm and kube-scheduler with the
// Onepool profile of the chart, until the test ends.
func startIntegration(t *testing.T, cfg *rest.Config) *itEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	s := &itEnv{kc: kc, dyn: dyn, slurm: newFakeSlurmrestd(t, "v0.0.42")}
	installPodGroupCRD(t, dyn)
	// The placeholder key's Secret: the plugin makes it there.
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onepool-system"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	port := freePort(t)
	s.release = "http://127.0.0.1:" + port
	args, err := decodeArgs(fmt.Sprintf(`{"slurmrestURL":%q,"tokenFile":%q,"slurmrestAPIVersion":"v0.0.42",
		"placeholderKeySecret":"onepool-system/onepool-scheduler-placeholder-key",
		"releaseURL":%q,"releaseListenAddress":"127.0.0.1:%s",
		"defaultPartition":"main","defaultTimeLimit":"1h","immediateAllocation":true,
		"pollInterval":"100ms","staleAfter":"10s","jobListInterval":"1s","startPollInterval":"50ms","watchInterval":"100ms","requestTimeout":"5s"}`,
		s.slurm.srv.URL, s.slurm.tokenFile(t), s.release, port))
	require.NoError(t, err)

	// The chart's profile: Onepool at every extension point, Slurm's
	// allocator instead of DynamicResources, no Kubernetes preemption.
	versioned := kubeschedv1.KubeSchedulerConfiguration{Profiles: []kubeschedv1.KubeSchedulerProfile{{
		SchedulerName: ptr.To(keys.SchedulerName),
		Plugins: &kubeschedv1.Plugins{
			MultiPoint: kubeschedv1.PluginSet{Enabled: []kubeschedv1.Plugin{{Name: Name}}, Disabled: []kubeschedv1.Plugin{{Name: "DynamicResources"}}},
			PostFilter: kubeschedv1.PluginSet{Disabled: []kubeschedv1.Plugin{{Name: "DefaultPreemption"}}},
		},
	}}}
	kubescheme.Scheme.Default(&versioned)
	var internal kubeconfig.KubeSchedulerConfiguration
	require.NoError(t, kubescheme.Scheme.Convert(&versioned, &internal, nil))
	prof := internal.Profiles[0]
	prof.PluginConfig = append(prof.PluginConfig, kubeconfig.PluginConfig{Name: Name, Args: args})

	informers := kubesched.NewInformerFactory(kc, 0)
	dynInformers := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kc.EventsV1()})
	sched, err := kubesched.New(ctx, kc, informers, dynInformers, profile.NewRecorderFactory(broadcaster),
		kubesched.WithProfiles(prof),
		kubesched.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{Name: Factory(nil)}),
		kubesched.WithKubeConfig(cfg),
		kubesched.WithPodInitialBackoffSeconds(1), kubesched.WithPodMaxBackoffSeconds(1))
	if err != nil && strings.Contains(err.Error(), "duplicate metrics collector registration") {
		// The plugin registers its slurmrest client's series in
		// kube-scheduler's global registry: one plugin per process.
		cancel()
		t.Skip("the Onepool plugin already ran in this test process (go test -count > 1)")
	}
	require.NoError(t, err)
	broadcaster.StartRecordingToSink(ctx.Done())
	informers.Start(ctx.Done())
	dynInformers.Start(ctx.Done())
	informers.WaitForCacheSync(ctx.Done())
	dynInformers.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		broadcaster.Shutdown()
		informers.Shutdown()
	})
	return s
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	return port
}

// releaseAnswer is what the release endpoint answers a placeholder
// script of job id (0 when it does not answer).
func (s *itEnv) releaseAnswer(t *testing.T, id uint32) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("%s%s%d", s.release, keys.ReleasePath, id))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

var podGroupCRD = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installPodGroupCRD installs scheduler-plugins' PodGroup, as much of it
// as onepool reads (spec.minMember), and waits until it is served.
func installPodGroupCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": PodGroupGVR.Resource + "." + PodGroupGVR.Group},
		"spec": map[string]any{
			"group": PodGroupGVR.Group, "scope": "Namespaced",
			"names": map[string]any{"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
			"versions": []any{map[string]any{
				"name": PodGroupGVR.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	ctx := context.Background()
	if _, err := dyn.Resource(podGroupCRD).Create(ctx, crd, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	testenv.Eventually(t, 30*time.Second, "the PodGroup CRD is served", func() (bool, string) {
		_, err := dyn.Resource(PodGroupGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
}
