package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNodeSetServed(t *testing.T) {
	withNodeSets := &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "nodesets"}, {Name: "nodesets/status"}, {Name: "tenantpolicies"}}}
	noPolicies := &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "nodesets"}, {Name: "nodesets/status"}}}
	otherOnly := &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "somethingelse"}}}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "onepool.dev", Resource: "v1alpha1"}, "")
	timeout := errors.New("dial tcp 10.96.0.1:443: i/o timeout")
	for _, tc := range []struct {
		name    string
		list    *metav1.APIResourceList
		err     error
		served  bool
		unknown bool
	}{
		{"served", withNodeSets, nil, true, false},
		{"group version served without NodeSets", otherOnly, nil, false, false},
		{"NodeSets without TenantPolicies (an upgrade that skipped the new CRD)", noPolicies, nil, false, false},
		{"group version not served (CRD missing or other version)", nil, notFound, false, false},
		{"API server unreachable: unknown, no decision", nil, timeout, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served, err := nodeSetServed(tc.list, tc.err)
			assert.Equal(t, tc.served, served)
			assert.Equal(t, tc.unknown, err != nil)
		})
	}
}

func TestNodeSetAPIMessageSaysWhatToDo(t *testing.T) {
	m := nodeSetAPIMessage()
	for _, want := range []string{"onepool.dev/v1alpha1 nodesets, tenantpolicies", "NodeSet controller and the TenantPolicy status are off", "syncer acts on no slurmd pod", "charts/onepool/crds"} {
		assert.Contains(t, m, want)
	}
}
