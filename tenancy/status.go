package tenancy

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// ConditionReady is the TenantPolicy's condition: False with reason
// ReasonConflict while a namespace it covers is covered by another policy
// too (that namespace's pods are refused).
const (
	ConditionReady = keys.TenantPolicyReady
	ReasonConflict = keys.TenantPolicyReasonConflict
	ReasonCovers   = keys.TenantPolicyReasonCovers
)

// Status is what policy p's status says, given every policy and every
// namespace: how many namespaces it covers, and its Ready condition.
func Status(p *v1alpha1.TenantPolicy, all []*v1alpha1.TenantPolicy, namespaces []corev1.Namespace) v1alpha1.TenantPolicyStatus {
	var covered int32
	var conflicts []string
	for i := range namespaces {
		ns := &namespaces[i]
		if !Covers(p, ns) {
			continue
		}
		covered++
		for _, q := range all {
			if q.Name != p.Name && Covers(q, ns) {
				conflicts = append(conflicts, fmt.Sprintf("%s (also %s)", ns.Name, q.Name))
			}
		}
	}
	st := v1alpha1.TenantPolicyStatus{Namespaces: covered, Conditions: slices.Clone(p.Status.Conditions)}
	c := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonCovers,
		Message: fmt.Sprintf("covers %d namespaces", covered), ObservedGeneration: p.Generation}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		c.Status, c.Reason = metav1.ConditionFalse, ReasonConflict
		c.Message = "namespaces covered by another policy too; their onepool pods are refused: " + strings.Join(conflicts, ", ")
	}
	meta.SetStatusCondition(&st.Conditions, c)
	return st
}
