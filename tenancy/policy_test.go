package tenancy

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

func policy(name string, names []string, sel map[string]string, spec func(*v1alpha1.TenantPolicySpec)) *v1alpha1.TenantPolicy {
	p := &v1alpha1.TenantPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Namespaces.Names = names
	if sel != nil {
		p.Spec.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	if spec != nil {
		spec(&p.Spec)
	}
	return p
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestMatch(t *testing.T) {
	a := policy("team-a", []string{"ml-a"}, map[string]string{"team": "a"}, nil)
	b := policy("team-b", []string{"ml-b"}, nil, nil)
	empty := policy("empty-selector", nil, map[string]string{}, nil)
	dflt := policy("single-team", nil, nil, nil)
	for _, tc := range []struct {
		name     string
		policies []*v1alpha1.TenantPolicy
		ns       *corev1.Namespace
		dflt     string
		want     string
		err      error
	}{
		{"by name", []*v1alpha1.TenantPolicy{a, b}, ns("ml-b", nil), "", "team-b", nil},
		{"by label", []*v1alpha1.TenantPolicy{a, b}, ns("serving", map[string]string{"team": "a"}), "", "team-a", nil},
		{"covered by none", []*v1alpha1.TenantPolicy{a, b}, ns("other", nil), "", "", ErrNoPolicy},
		{"an empty selector covers nothing", []*v1alpha1.TenantPolicy{empty}, ns("other", map[string]string{"x": "y"}), "", "", ErrNoPolicy},
		{"covered by two", []*v1alpha1.TenantPolicy{a, policy("also-a", []string{"ml-a"}, nil, nil)}, ns("ml-a", nil), "", "", ErrConflict},
		{"the default for the uncovered", []*v1alpha1.TenantPolicy{a, dflt}, ns("other", nil), "single-team", "single-team", nil},
		{"a covering policy wins over the default", []*v1alpha1.TenantPolicy{a, dflt}, ns("ml-a", nil), "single-team", "team-a", nil},
		{"a default that does not exist", []*v1alpha1.TenantPolicy{a}, ns("other", nil), "single-team", "", ErrNoPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Match(tc.policies, tc.ns, tc.dflt)
			if tc.err != nil {
				assert.True(t, errors.Is(err, tc.err), "err %v, want %v", err, tc.err)
				assert.Nil(t, p)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, p.Name)
		})
	}
}

func TestDecide(t *testing.T) {
	teamB := policy("team-b", []string{"ml-b"}, nil, func(s *v1alpha1.TenantPolicySpec) {
		s.SlurmUser = "team-b"
		s.QOS = v1alpha1.Choice{Allowed: []string{"normal", "inference"}, Default: "normal"}
		s.Accounts = v1alpha1.Choice{Default: "team-b"}
		s.Partitions = v1alpha1.Choice{Allowed: []string{Any}}
		s.Exclusive = v1alpha1.Choice{Allowed: []string{"user"}}
		s.MaxGPUsPerPod = 4
	})
	for _, tc := range []struct {
		name    string
		ask     Ask
		want    Grant
		refused string
	}{
		{"nothing named: the defaults", Ask{GPUs: 1},
			Grant{Policy: "team-b", SlurmUser: "team-b", QOS: "normal", Account: "team-b", Exclusive: ""}, ""},
		{"an allowed QOS", Ask{QOS: "inference", GPUs: 4},
			Grant{Policy: "team-b", SlurmUser: "team-b", QOS: "inference", Account: "team-b", Exclusive: ""}, ""},
		{"any partition", Ask{Partition: "gpu-h100"},
			Grant{Policy: "team-b", SlurmUser: "team-b", Partition: "gpu-h100", QOS: "normal", Account: "team-b", Exclusive: ""}, ""},
		{"the default named, and none", Ask{Account: "team-b", Exclusive: "none"},
			Grant{Policy: "team-b", SlurmUser: "team-b", QOS: "normal", Account: "team-b", Exclusive: "none"}, ""},
		{"an allowed exclusive mode", Ask{Exclusive: "user"},
			Grant{Policy: "team-b", SlurmUser: "team-b", QOS: "normal", Account: "team-b", Exclusive: "user"}, ""},
		{"QOS high: preempts training", Ask{QOS: "high"}, Grant{}, `TenantPolicy "team-b" does not allow QOS "high" (allowed: normal, inference)`},
		{"another team's account", Ask{Account: "team-a"}, Grant{}, `TenantPolicy "team-b" does not allow account "team-a" (allowed: team-b)`},
		{"whole nodes", Ask{Exclusive: "node"}, Grant{}, `TenantPolicy "team-b" does not allow exclusive mode "node" (allowed: user, none)`},
		{"too many GPUs", Ask{GPUs: 8}, Grant{}, `TenantPolicy "team-b" does not allow GPUs per pod "8" (allowed: at most 4)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Decide(teamB, tc.ask)
			if tc.refused != "" {
				var r *Refusal
				require.True(t, errors.As(err, &r), "err %v", err)
				assert.Equal(t, tc.refused, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, g)
		})
	}
	strict := policy("strict", nil, nil, nil)
	_, err := Decide(strict, Ask{QOS: "normal"})
	assert.EqualError(t, err, `TenantPolicy "strict" does not allow QOS "normal" (allowed: none: the policy sets no default and allows no value)`)
}
