package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/internal/testenv"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/test/lab"
)

// schedEnv is one scheduler test: its own namespace of onepool pods.
// Cleanup deletes the pods and waits until Slurm lists none of their
// placeholder jobs as active, so the next test finds the GPUs free.
type schedEnv struct {
	t  *testing.T
	l  *lab.Lab
	kc kubernetes.Interface
	sc *slurmrest.Client
	ns string
}

// newSchedEnv is a namespace for pods on the lab's kwok GPU nodes, which
// publish no DRA devices: it keeps the device-plugin way (labelled out of
// the GPU webhook), and pods ask nvidia.com/gpu as they are.
func newSchedEnv(t *testing.T) *schedEnv {
	return newSchedEnvLabels(t, map[string]string{lab.LabelGPUClaims: lab.GPUClaimsDisabled})
}

// newGPUClaimsEnv is a namespace whose onepool pods go through the GPU
// webhook (their GPUs come from Slurm through DRA).
func newGPUClaimsEnv(t *testing.T) *schedEnv { return newSchedEnvLabels(t, nil) }

func newSchedEnvLabels(t *testing.T, labels map[string]string) *schedEnv {
	t.Helper()
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	e := &schedEnv{t: t, l: l, kc: kc, sc: slurmClient(t, l), ns: uniqueName("sched")}
	if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cleanup)
	return e
}

func (e *schedEnv) cleanup() {
	ctx := context.Background()
	zero := int64(0)
	_ = e.kc.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if len(e.activeJobs("")) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if left := e.activeJobs(""); len(left) > 0 {
		e.t.Errorf("cleanup: placeholder jobs still active after the pods went: %v", jobIDs(left))
	}
	_ = e.kc.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{})
}

// pod is a onepool pod asking gpus GPUs.
func (e *schedEnv) pod(name string, gpus int64, annotations map[string]string) *corev1.Pod {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	lim := corev1.ResourceList{}
	if gpus > 0 {
		lim["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			SchedulerName: keys.SchedulerName,
			Containers:    []corev1.Container{{Name: "infer", Image: "onepool/infer:lab", Resources: corev1.ResourceRequirements{Requests: res, Limits: lim}}},
		},
	}
}

func (e *schedEnv) create(p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	got, err := e.kc.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *schedEnv) get(name string) (*corev1.Pod, error) {
	return e.kc.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
}

// withJobID waits until the pod names its placeholder job (the scheduler
// writes that annotation apart from binding, so it may follow the bind by
// moments) and returns the pod.
func (e *schedEnv) withJobID(name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	eventually(e.t, 15*time.Second, "pod "+name+" names its Slurm job", func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.Annotations[keys.AnnotationJobID] != "", fmt.Sprint(p.Annotations)
	})
	return pod
}

// waitBound waits until the pod is bound and returns its node.
func (e *schedEnv) waitBound(name string, timeout time.Duration) string {
	e.t.Helper()
	node := ""
	eventually(e.t, timeout, "pod "+name+" bound", func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		node = p.Spec.NodeName
		return node != "", "PodScheduled: " + scheduledMessage(p)
	})
	return node
}

func (e *schedEnv) waitGone(name string, timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, "pod "+name+" gone", func() (bool, string) {
		p, err := e.get(name)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("node %q, deleting %v", p.Spec.NodeName, p.DeletionTimestamp != nil)
	})
}

// scheduledMessage is what kubectl describe shows under PodScheduled.
func scheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return string(c.Status) + " " + c.Reason + ": " + c.Message
		}
	}
	return "(no PodScheduled condition)"
}

// waitPendingWith waits until the pod's PodScheduled message holds want.
func (e *schedEnv) waitPendingWith(name, want string, timeout time.Duration) string {
	e.t.Helper()
	msg := ""
	eventually(e.t, timeout, "pod "+name+" pending with "+want, func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		msg = scheduledMessage(p)
		return p.Spec.NodeName == "" && strings.Contains(msg, want), msg
	})
	return msg
}

// jobs lists the placeholder jobs of one pod of this test (all of its
// pods for name ""), active or not, as slurmrestd lists them.
func (e *schedEnv) jobs(name string) []slurmrest.Job {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.sc.ListJobs(ctx, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []slurmrest.Job
	for _, j := range l.Jobs {
		if strings.HasPrefix(j.Comment, "onepool:pod="+e.ns+"/"+name) && (name == "" || strings.HasPrefix(j.Comment, "onepool:pod="+e.ns+"/"+name+";")) ||
			strings.HasPrefix(j.Comment, "onepool:group="+e.ns+"/"+name) || strings.HasPrefix(j.Comment, "onepool:lws="+e.ns+"/"+name) ||
			strings.HasPrefix(j.Comment, "onepool:jobset="+e.ns+"/"+name) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b slurmrest.Job) int { return int(a.ID) - int(b.ID) })
	return out
}

func (e *schedEnv) activeJobs(name string) []slurmrest.Job {
	var out []slurmrest.Job
	for _, j := range e.jobs(name) {
		if !j.State.Finished() || j.State.Has("COMPLETING") {
			out = append(out, j)
		}
	}
	return out
}

// refusedAllocation says whether j is Slurm's record of an immediate
// allocation it refused for now (FAILED at once: started and ended when
// submitted): the scheduler then queued a batch placeholder.
func refusedAllocation(j slurmrest.Job) bool {
	return j.State.Base() == slurmrest.JobFailed && !j.EndTime.After(j.StartTime)
}

// onlyJob returns the one placeholder job of a pod, failing on none or
// more; a record of an immediate allocation Slurm refused does not count.
func (e *schedEnv) onlyJob(name string) slurmrest.Job {
	e.t.Helper()
	js := slices.DeleteFunc(e.jobs(name), refusedAllocation)
	if len(js) != 1 {
		e.t.Fatalf("pod %s: want exactly 1 placeholder job, Slurm lists %d: %v", name, len(js), jobIDs(js))
	}
	return js[0]
}

// eventSoon is hasEvent, waiting up to 15 s for the event: components
// record events in the background, after what the test saw happen.
func (e *schedEnv) eventSoon(name, reason, text string) (bool, string) {
	return soon(func() (bool, string) { return e.hasEvent(name, reason, text) })
}

// hasEvent says whether the pod got an event with reason (and text).
func (e *schedEnv) hasEvent(name, reason, text string) (bool, string) {
	return testenv.HasEvent(e.kc, e.ns, name, reason, text)
}

func (e *schedEnv) slurm(args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := e.l.Slurm(ctx, args...)
	if err != nil {
		e.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func jobIDs(js []slurmrest.Job) []string {
	var s []string
	for _, j := range js {
		s = append(s, fmt.Sprintf("%d(%s)", j.ID, strings.Join(j.State, "+")))
	}
	return s
}

// holdsPod checks that cond stays true of the pod for d.
func (e *schedEnv) holdsPod(d time.Duration, name string, cond func(*corev1.Pod) (bool, string)) {
	e.t.Helper()
	holds(e.t, d, "pod "+name, func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		return cond(p)
	})
}
