package kubenet

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

func TestReadyEndpoints(t *testing.T) {
	slices := []discoveryv1.EndpointSlice{
		{
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](10259)}, {Name: ptr.To("release"), Port: ptr.To[int32](10270)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.89.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{"10.89.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}, // a standby still starting
				{Addresses: []string{"10.89.0.7"}}, // no condition: ready
			},
		},
		{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("release"), Port: nil}}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.89.0.8"}}}},
	}
	assert.Equal(t, []string{"10.89.0.5:10270", "10.89.0.7:10270"}, readyEndpoints(slices, "release"))
	assert.Empty(t, readyEndpoints(slices, "metrics"))
}

func TestParseBackends(t *testing.T) {
	noKube := func() (kubernetes.Interface, error) { t.Fatal("no kube client needed"); return nil, nil }
	b, err := ParseBackends("127.0.0.1:1,127.0.0.1:2", noKube)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, b(context.Background()))
	for _, bad := range []string{"", "nohost", "endpoints:ns/svc"} {
		_, err := ParseBackends(bad, noKube)
		assert.Error(t, err, "%q", bad)
	}
}
