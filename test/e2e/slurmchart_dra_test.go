package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
)

// draOnlyOwnNodeSlices attacks with the credential a DRA driver holds:
// the token in the slurmd pod's dra container, taken as someone who got
// into that container would. The chart's policy lets it write only the
// gpu.onepool.dev ResourceSlices of the node its pod runs on.
func draOnlyOwnNodeSlices(t *testing.T, s *slurmChart) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := s.l.SlurmChartExecIn(ctx, "slurmd", "dra", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	require.NoError(t, err)
	onlyOwnNodeSlices(t, s.l, string(tok))
}

// onlyOwnNodeSlices attacks with a DRA driver's token (of a pod on the
// real node): it may write only the gpu.onepool.dev ResourceSlices of
// that node, and its own slice is there.
func onlyOwnNodeSlices(t *testing.T, l *lab.Lab, tok string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adminCfg, err := l.RESTConfig()
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(adminCfg)
	cfg.BearerToken = strings.TrimSpace(tok)
	agent, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	admin, err := kubernetes.NewForConfig(adminCfg)
	require.NoError(t, err)

	slice := func(name, node, driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	}
	refused := func(what string, err error) {
		t.Helper()
		if assert.Error(t, err, what) {
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%s: %v", what, err)
			assert.Contains(t, err.Error(), "writes only the "+keys.GPUDriverName+" ResourceSlices of that node", what)
		}
	}
	other, foreign := uniqueName("vap-other"), uniqueName("vap-driver")
	t.Cleanup(func() { // only if the attack worked
		for _, n := range []string{other, foreign} {
			_ = admin.ResourceV1().ResourceSlices().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, slice(other, "another-node", keys.GPUDriverName), metav1.CreateOptions{})
	refused("a slice of another node", err)
	_, err = agent.ResourceV1().ResourceSlices().Create(ctx, slice(foreign, lab.RealNodeName, "gpu.example.com"), metav1.CreateOptions{})
	refused("another driver's slice on its own node", err)

	// Another node's slice, there already: the agent may not delete it.
	theirs, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice(uniqueName("vap-theirs"), "another-node", keys.GPUDriverName), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.ResourceV1().ResourceSlices().Delete(context.Background(), theirs.Name, metav1.DeleteOptions{})
	})
	refused("deleting another node's slice", agent.ResourceV1().ResourceSlices().Delete(ctx, theirs.Name, metav1.DeleteOptions{}))

	// Its own node's slices it does write: the one it published is there.
	list, err := agent.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	own := 0
	for _, sl := range list.Items {
		if sl.Spec.Driver == keys.GPUDriverName && sl.Spec.NodeName != nil && *sl.Spec.NodeName == lab.RealNodeName {
			own++
		}
	}
	assert.Equal(t, 1, own, "the driver published its node's slice")
}
