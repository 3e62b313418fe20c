package tenancy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

func TestStatus(t *testing.T) {
	a := policy("team-a", []string{"ml-a"}, map[string]string{"team": "a"}, nil)
	b := policy("team-b", []string{"ml-b", "shared"}, nil, nil)
	nss := []corev1.Namespace{*ns("ml-a", nil), *ns("serving-a", map[string]string{"team": "a"}), *ns("ml-b", nil), *ns("other", nil)}

	st := Status(a, []*v1alpha1.TenantPolicy{a, b}, nss)
	assert.Equal(t, int32(2), st.Namespaces)
	c := meta.FindStatusCondition(st.Conditions, ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, "covers 2 namespaces", c.Message)

	shared := append(nss, *ns("shared", map[string]string{"team": "a"}))
	st = Status(a, []*v1alpha1.TenantPolicy{a, b}, shared)
	c = meta.FindStatusCondition(st.Conditions, ConditionReady)
	assert.Equal(t, int32(3), st.Namespaces)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, ReasonConflict, c.Reason)
	assert.Contains(t, c.Message, "shared (also team-b)")
}
