// Package tenancy decides what a pod may ask of Slurm: which TenantPolicy
// covers its namespace, and what that policy grants of what the pod's
// annotations ask. The admission webhook and the scheduler both decide
// with it, so a pod is refused at creation and, should the policy change
// after, again before any job is submitted.
package tenancy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/onepool/onepool/tenancy/api/v1alpha1"
)

// Any in a Choice's allowed list allows every value.
const Any = "*"

// ErrNoPolicy: no TenantPolicy covers the namespace (and no default is
// named). ErrConflict: more than one does.
var (
	ErrNoPolicy = errors.New("no TenantPolicy covers the namespace")
	ErrConflict = errors.New("more than one TenantPolicy covers the namespace")
)

// Covers says whether policy p covers namespace ns.
func Covers(p *v1alpha1.TenantPolicy, ns *corev1.Namespace) bool {
	if slices.Contains(p.Spec.Namespaces.Names, ns.Name) {
		return true
	}
	sel := p.Spec.Namespaces.Selector
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(ns.Labels))
}

// Match returns the one policy that covers ns; with none, the policy
// named defaultName (if it exists). The error wraps ErrNoPolicy or
// ErrConflict and names the policies.
func Match(policies []*v1alpha1.TenantPolicy, ns *corev1.Namespace, defaultName string) (*v1alpha1.TenantPolicy, error) {
	var hit []*v1alpha1.TenantPolicy
	var dflt *v1alpha1.TenantPolicy
	for _, p := range policies {
		if Covers(p, ns) {
			hit = append(hit, p)
		}
		if defaultName != "" && p.Name == defaultName {
			dflt = p
		}
	}
	switch {
	case len(hit) == 1:
		return hit[0], nil
	case len(hit) > 1:
		names := make([]string, len(hit))
		for i, p := range hit {
			names[i] = p.Name
		}
		slices.Sort(names)
		return nil, fmt.Errorf("%w %q: %s (an admin must make them disjoint)", ErrConflict, ns.Name, strings.Join(names, ", "))
	case dflt != nil:
		return dflt, nil
	case defaultName != "":
		return nil, fmt.Errorf("%w %q, and the default policy %q does not exist", ErrNoPolicy, ns.Name, defaultName)
	}
	return nil, fmt.Errorf("%w %q: ask the cluster admin for one", ErrNoPolicy, ns.Name)
}

// Ask is what a pod asks of Slurm: each setting as its annotation names
// it ("" when it names none), and its GPUs per node.
type Ask struct {
	Partition, QOS, Account, Exclusive string
	GPUs                               int64
}

// Grant is what the pod gets: the setting it named, else the policy's
// default ("" leaves it to the scheduler's defaults and then Slurm), and
// the Slurm user its job runs as ("" onepool's own).
type Grant struct {
	Policy                             string
	SlurmUser                          string
	Partition, QOS, Account, Exclusive string
}

// Refusal is a policy's no: which policy, which setting, what was asked
// and what is allowed. Its message is what the pod's author reads.
type Refusal struct {
	Policy  string
	Setting string // "partition", "QOS", "account", "exclusive mode", "GPUs per pod"
	Value   string
	Allowed string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("TenantPolicy %q does not allow %s %q (allowed: %s)", r.Policy, r.Setting, r.Value, r.Allowed)
}

// Decide checks ask against policy p and fills in its defaults.
func Decide(p *v1alpha1.TenantPolicy, ask Ask) (Grant, error) {
	g := Grant{Policy: p.Name, SlurmUser: p.Spec.SlurmUser}
	// "none" (GPU by GPU beside other jobs) is always allowed.
	excl := p.Spec.Exclusive
	excl.Allowed = append(slices.Clone(excl.Allowed), "none")
	for _, c := range []struct {
		setting string
		choice  v1alpha1.Choice
		asked   string
		out     *string
	}{
		{"partition", p.Spec.Partitions, ask.Partition, &g.Partition},
		{"QOS", p.Spec.QOS, ask.QOS, &g.QOS},
		{"account", p.Spec.Accounts, ask.Account, &g.Account},
		{"exclusive mode", excl, ask.Exclusive, &g.Exclusive},
	} {
		v, err := choose(c.choice, c.asked)
		if err != nil {
			return Grant{}, &Refusal{Policy: p.Name, Setting: c.setting, Value: c.asked, Allowed: allowedText(c.choice)}
		}
		*c.out = v
	}
	if max := int64(p.Spec.MaxGPUsPerPod); max > 0 && ask.GPUs > max {
		return Grant{}, &Refusal{Policy: p.Name, Setting: "GPUs per pod", Value: fmt.Sprint(ask.GPUs), Allowed: fmt.Sprintf("at most %d", max)}
	}
	return g, nil
}

// choose is the value a pod gets for one setting: what it asked if the
// choice allows it (the default always is), else an error; the default
// when it asked nothing.
func choose(c v1alpha1.Choice, asked string) (string, error) {
	if asked == "" || asked == c.Default {
		return c.Default, nil
	}
	if slices.Contains(c.Allowed, asked) || slices.Contains(c.Allowed, Any) {
		return asked, nil
	}
	return "", errors.New("not allowed")
}

func allowedText(c v1alpha1.Choice) string {
	if slices.Contains(c.Allowed, Any) {
		return "any"
	}
	vs := slices.Clone(c.Allowed)
	if c.Default != "" && !slices.Contains(vs, c.Default) {
		vs = append(vs, c.Default)
	}
	if len(vs) == 0 {
		return "none: the policy sets no default and allows no value"
	}
	return strings.Join(vs, ", ")
}
