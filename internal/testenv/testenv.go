// Package testenv starts the kube-apiserver and etcd of a package's envtest
// suite (the lab's binaries, found through KUBEBUILDER_ASSETS, which `make
// unit` sets) and a controller manager against it.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var (
	once sync.Once
	env  *envtest.Environment
	err  error
)

// Start starts one kube-apiserver and etcd for the test binary (crds are
// installed from those folders) and returns it; Stop in TestMain ends it.
// Without KUBEBUILDER_ASSETS the test is skipped.
func Start(t *testing.T, crds ...string) *envtest.Environment {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS unset: run `make unit` (it builds kube-apiserver and etcd into .lab/bin)")
	}
	once.Do(func() {
		// controller-runtime's and client-go's own logs stay out of go test's.
		klog.SetLogger(logr.Discard())
		ctrl.SetLogger(logr.Discard())
		e := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: len(crds) > 0}
		var log bytes.Buffer
		api := e.ControlPlane.GetAPIServer()
		api.Out, api.Err = &log, &log
		// A network namespace without a default route (make ci-fresh)
		// leaves the apiserver no address of its own choosing.
		api.Configure().Set("advertise-address", "127.0.0.1")
		if _, err = e.Start(); err != nil {
			err = fmt.Errorf("%w; kube-apiserver said: %s", err, log.String())
			return
		}
		env = e
	})
	require.NoError(t, err)
	return env
}

// Stop ends what Start started.
func Stop() {
	if env != nil {
		_ = env.Stop()
	}
}

// Manager is a controller manager on the envtest apiserver (no metrics or
// probe ports, no leader election); register controllers with setup, and
// it runs until the test ends. It returns a client that reads the apiserver
// directly.
func Manager(t *testing.T, e *envtest.Environment, scheme *runtime.Scheme, setup func(ctrl.Manager) error) client.Client {
	t.Helper()
	skip, pq := true, false
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// As the controller manager runs them (see its main.go): the
		// classic work queue, not controller-runtime 0.23's priority queue.
		Controller: config.Controller{SkipNameValidation: &skip, UsePriorityQueue: &pq},
	})
	require.NoError(t, err)
	require.NoError(t, setup(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			// What still runs says why: every goroutine's stack, to a file.
			f := filepath.Join(os.TempDir(), fmt.Sprintf("testenv-stop-%d-%d.txt", os.Getpid(), time.Now().UnixNano()))
			if out, err := os.Create(f); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(out, 2)
				_ = out.Close()
			}
			t.Errorf("the manager did not stop within 30 s (goroutines: %s)", f)
		}
	})
	c, err := client.New(e.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// Eventually polls cond every 50 ms until it holds, failing the test with
// the last state cond reported after timeout.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s (last: %s)", what, timeout, last)
}

// Holds checks that cond stays true for d.
func Holds(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ok, state := cond(); !ok {
			t.Fatalf("%s: stopped holding: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HasEvent says whether object name in namespace ns ("" for every
// namespace) got an event with reason whose message holds text; otherwise
// it lists the events it has, for the failure message.
func HasEvent(kc kubernetes.Interface, ns, name, reason, text string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.Reason == reason && strings.Contains(ev.Message, text) {
			return true, ""
		}
		seen = append(seen, ev.Reason+": "+ev.Message)
	}
	return false, strings.Join(seen, " | ")
}
