package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/test/lab"
)

// TestControllerManagerWithoutTheNodeSetAPI starts the controller manager
// on a cluster whose NodeSet CRD does not serve the version it speaks (a
// wrong CRD installed): it stays alive, is not Ready with a message that
// says what to do, logs it once, and acts on no slurmd pod (it cannot
// prove that a NodeSet owns one). When the version is served again its liveness fails, so a kubelet
// would restart it with the NodeSet controller on.
func TestControllerManagerWithoutTheNodeSetAPI(t *testing.T) {
	if lab.ChartMode() {
		t.Skip("starts the controller manager as a process with its probes on the lab's port")
	}
	e := newSyncerEnv(t, "gpu-1")
	l := e.l
	ctx := context.Background()
	serve := func(on bool) {
		t.Helper()
		patch := `[{"op":"replace","path":"/spec/versions/0/served","value":` + map[bool]string{true: "true", false: "false"}[on] + `}]`
		e.kubectl("patch", "crd", "nodesets.onepool.dev", "--type=json", "-p", patch)
		eventually(t, 30*time.Second, "discovery follows the CRD", func() (bool, string) {
			// The group version stays (TenantPolicies are served in it).
			list, err := e.kc.Discovery().ServerResourcesForGroupVersion("onepool.dev/v1alpha1")
			has := err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "nodesets" })
			return has == on, "discovery: " + errString(err)
		})
	}
	require.NoError(t, l.StopControllerManager())
	t.Cleanup(func() {
		serve(true)
		_ = l.StopControllerManager()
		if err := l.StartControllerManager(ctx); err != nil {
			t.Errorf("controller manager back: %v", err)
		}
	})
	serve(false)
	require.NoError(t, l.StartControllerManagerLive(ctx))

	// The probe names the failing check (controller-runtime withholds the
	// reason from HTTP answers); the log says what is wrong and what to do.
	eventually(t, 30*time.Second, "not Ready", func() (bool, string) {
		code, body, err := l.ControllerManagerProbe(ctx, "readyz")
		return err == nil && code != 200 && strings.Contains(body, "[-]nodeset-api failed"), body + errString(err)
	})
	log := filepath.Join(l.LogDir(), "onepool-controller-manager.out")
	logs, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Contains(t, string(logs), "the NodeSet API is not served", "the log says what is wrong")
	assert.Contains(t, string(logs), "charts/onepool/crds", "the log says what to do")

	// Meanwhile no pod can be proven a slurmd pod (a NodeSet must own
	// it): the syncer fails closed, and a cordon drains nothing.
	e.kubectl("cordon", e.node)
	e.holds(10*time.Second, "Slurm node "+e.node+" not drained", func() (bool, string) {
		kv := scontrolNode(t, l, e.node)
		return !strings.Contains(kv["State"], "DRAIN"), kv["State"] + " " + kv["Reason"]
	})
	code, _, err := l.ControllerManagerProbe(ctx, "healthz")
	require.NoError(t, err)
	assert.Equal(t, 200, code, "alive while the API is missing")

	serve(true)
	eventually(t, 90*time.Second, "liveness asks for a restart once NodeSets are served", func() (bool, string) {
		code, body, err := l.ControllerManagerProbe(ctx, "healthz")
		return err == nil && code != 200 && strings.Contains(body, "[-]nodeset-api failed"), body + errString(err)
	})
	logs, err = os.ReadFile(log)
	require.NoError(t, err)
	assert.Contains(t, string(logs), "liveness fails so that the pod restarts")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
