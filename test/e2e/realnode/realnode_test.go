// Package realnode runs pods from onepool's own images on the lab's real
// kubelet + containerd node (lab.SharedNode): skipped unless
// ONEPOOL_LAB_REAL_KUBELET=1.
package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/test/lab"
)

const ns = "default"

// TestControllerManagerImageRunsOnRealNode runs the controller manager's
// image twice on the real node, from the image containerd imported (never
// pulled): once with --help to completion, once as a container that stays
// up; both logs are read through the apiserver (kubectl logs), which asks
// the kubelet.
func TestControllerManagerImageRunsOnRealNode(t *testing.T) {
	l := lab.SharedNode(t)
	img, err := l.NodeImage("controller-manager")
	if err != nil {
		// The real node runs: a missing image is a broken `make images`,
		// never a reason to pass.
		t.Fatalf("no controller-manager image: %v", err)
	}
	image := img.Names[1] // localhost/onepool/controller-manager:<version>
	t.Logf("image %s (archive %s)", image, img.Archive)
	cs, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e6)

	t.Run("help", func(t *testing.T) {
		pod := realPod("cm-help-"+suffix, image)
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.Containers[0].Args = []string{"--help"}
		took := runPod(t, cs, pod, corev1.PodSucceeded)
		t.Logf("pod %s: created to Succeeded in %s", pod.Name, took)
		if logs := kubectlLogs(t, l, pod.Name); !strings.Contains(logs, "-slurmrest-url") {
			t.Fatalf("kubectl logs %s: no usage text:\n%s", pod.Name, logs)
		}
	})

	t.Run("stays-up", func(t *testing.T) {
		pod := realPod("cm-up-"+suffix, image)
		pod.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "echo onepool-lab-up; /usr/local/bin/onepool-controller-manager --help 2>&1 | head -1; exec sleep 3600"}
		took := runPod(t, cs, pod, corev1.PodRunning)
		t.Logf("pod %s: created to Running in %s", pod.Name, took)
		var logs string
		deadline := time.Now().Add(20 * time.Second)
		for {
			logs = kubectlLogs(t, l, pod.Name)
			if strings.Contains(logs, "Usage of onepool-controller-manager") || time.Now().After(deadline) {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if !strings.Contains(logs, "onepool-lab-up") || !strings.Contains(logs, "Usage of onepool-controller-manager") {
			t.Fatalf("kubectl logs %s: want both lines, got:\n%s", pod.Name, logs)
		}
		start := time.Now()
		deletePod(t, cs, pod.Name)
		t.Logf("pod %s: deleted and gone in %s", pod.Name, time.Since(start).Round(10*time.Millisecond))
	})
}

func realPod(name, image string) *corev1.Pod {
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "realnode-e2e"}},
		Spec: corev1.PodSpec{
			NodeName:                      lab.RealNodeName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "cm", Image: image, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// runPod creates pod and waits (at most 90 s) for phase; it fails at once
// on a phase the pod cannot leave, with its container states. The pod is
// deleted when the test ends.
func runPod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, cs, pod.Name) })
	last := ""
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			last = describe(p)
			if p.Status.Phase == phase {
				return time.Since(start).Round(10 * time.Millisecond)
			}
			if p.Status.Phase == corev1.PodFailed || (phase == corev1.PodRunning && p.Status.Phase == corev1.PodSucceeded) {
				t.Fatalf("pod %s: %s, want %s", pod.Name, last, phase)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s not %s after 90 s: %s", pod.Name, phase, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func describe(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(" %s: waiting %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(" %s: exit %d %s %s", c.Name, c.State.Terminated.ExitCode, c.State.Terminated.Reason, c.State.Terminated.Message)
		}
	}
	return s
}

func kubectlLogs(t *testing.T, l *lab.Lab, pod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, l.Kubectl(), "--kubeconfig", l.Kubeconfig(), "--request-timeout", "20s", "logs", "-n", ns, pod).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl logs %s: %v\n%s", pod, err, out)
	}
	return string(out)
}

// deletePod deletes a pod (grace 2 s) and waits at most 60 s until it is gone.
func deletePod(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	grace := int64(2)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Errorf("delete pod %s: %v", name, err)
		return
	}
	for {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("pod %s not gone after 60 s", name)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
