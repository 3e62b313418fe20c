package keys

// Doc says what one name means to whoever meets it on a cluster: where it
// appears, who writes it, what it means and what to do. Docs (here) and
// drain.Docs hold one for every exported string constant of packages keys
// and drain; docs/troubleshooting.md is generated from them (make
// generate), and a test fails when a constant has no Doc, a Doc names no
// constant, or the page is stale.
type Doc struct {
	Name  string // the constant's name in its package
	Value string // the constant itself
	Kind  Kind
	// Form is how the name appears where that is more than Value: a
	// prefix and what follows it ("onepool: node left nodeset <name>").
	Form string
	Type string // for an event reason: Normal or Warning
	On   string // the object (or place) it appears on
	By   string // who writes or sets it
	// Means is what it says; Do what to do about it ("": nothing).
	Means string
	Do    string
}

// Kind is what sort of name a Doc is about; the page has a section per
// kind, in this order.
type Kind int

const (
	KindEvent Kind = iota + 1
	KindDrainReason
	KindNodeCondition
	KindNodeConditionReason
	KindNodeSetCondition
	KindNodeSetConditionReason
	KindTenantPolicyCondition
	KindTenantPolicyConditionReason
	KindAnnotation
	KindLabel
	KindValue // a value of a label or annotation
	KindFinalizer
	KindAction
	KindEnv
	KindDRA
	KindPlaceholder
	KindSchedulerName
)
