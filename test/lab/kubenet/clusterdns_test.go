package kubenet

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func testDNSView() dnsView {
	svc := func(ns, name, ip string) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip}}
	}
	headless := svc("slurm", "slurm-controller", corev1.ClusterIPNone)
	headless.Spec.PublishNotReadyAddresses = true
	return dnsView{
		services: []corev1.Service{svc("slurm", "slurm-restapi", "10.96.5.5"), headless, svc("slurm", "slurm-mariadb", corev1.ClusterIPNone)},
		slices: []discoveryv1.EndpointSlice{
			{
				ObjectMeta: metav1.ObjectMeta{Namespace: "slurm", Name: "c-1", Labels: map[string]string{discoveryv1.LabelServiceName: "slurm-controller"}},
				Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.89.0.7"}, Hostname: ptr.To("slurm-controller-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
			},
			{
				ObjectMeta: metav1.ObjectMeta{Namespace: "slurm", Name: "m-1", Labels: map[string]string{discoveryv1.LabelServiceName: "slurm-mariadb"}},
				Endpoints: []discoveryv1.Endpoint{
					{Addresses: []string{"10.89.0.8"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
					{Addresses: []string{"10.89.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
				},
			},
		},
	}
}

func TestClusterDNSResolveA(t *testing.T) {
	v := testDNSView()
	for _, tc := range []struct {
		name  string
		want  []string
		known bool
	}{
		{"slurm-restapi.slurm.svc.cluster.local.", []string{"10.96.5.5"}, true},
		{"SLURM-RESTAPI.slurm.svc.cluster.local", []string{"10.96.5.5"}, true},
		// A StatefulSet pod by its hostname, not yet ready (publishNotReadyAddresses).
		{"slurm-controller-0.slurm-controller.slurm.svc.cluster.local.", []string{"10.89.0.7"}, true},
		// Headless: the ready endpoints only.
		{"slurm-mariadb.slurm.svc.cluster.local.", []string{"10.89.0.8"}, true},
		{"nosuch.slurm.svc.cluster.local.", nil, false},
		{"slurm-controller-1.slurm-controller.slurm.svc.cluster.local.", nil, false},
		{"deb.debian.org.", nil, false},
		// The search path's misses (ndots:5) must be quick NXDOMAINs.
		{"slurm-restapi.slurm.slurm.svc.cluster.local.", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := v.resolveA(tc.name)
			assert.Equal(t, tc.known, known)
			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}
			assert.Equal(t, tc.want, s)
		})
	}
}

func TestClusterDNSAnswer(t *testing.T) {
	v := testDNSView()
	query := func(name string) []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
		require.NoError(t, b.StartQuestions())
		require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}))
		m, err := b.Finish()
		require.NoError(t, err)
		return m
	}
	var m dnsmessage.Message
	reply, err := v.answer(query("slurm-restapi.slurm.svc.cluster.local."))
	require.NoError(t, err)
	require.NoError(t, m.Unpack(reply))
	assert.Equal(t, uint16(42), m.Header.ID)
	assert.Equal(t, dnsmessage.RCodeSuccess, m.Header.RCode)
	require.Len(t, m.Answers, 1)
	assert.Equal(t, netip.MustParseAddr("10.96.5.5").As4(), m.Answers[0].Body.(*dnsmessage.AResource).A)

	reply, err = v.answer(query("example.com."))
	require.NoError(t, err)
	require.NoError(t, m.Unpack(reply))
	assert.Equal(t, dnsmessage.RCodeNameError, m.Header.RCode)
	assert.Empty(t, m.Answers)

	_, err = v.answer([]byte{1, 2, 3})
	assert.Error(t, err, "garbage gets no answer")
}
