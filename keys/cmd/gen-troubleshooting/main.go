// Command gen-troubleshooting writes docs/troubleshooting.md from the name
// registries' tables (keys.Docs, drain.Docs): every event reason,
// condition, annotation, label, drain reason and other name onepool
// writes, what it means and what to do. Run it from the repository root
// (make generate does):
//
//	go run ./keys/cmd/gen-troubleshooting [-o docs/troubleshooting.md]
package main

import (
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/onepool/onepool/drain"
	"github.com/onepool/onepool/keys"
)

// Output is where the page goes, from the repository root.
const Output = "docs/troubleshooting.md"

func main() {
	out := flag.String("o", Output, "the file to write")
	flag.Parse()
	page, err := render(allDocs())
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-troubleshooting:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen-troubleshooting:", err)
		os.Exit(1)
	}
}

// pkgDocs are the Docs of one package.
type pkgDocs struct {
	pkg  string // "keys", "drain"
	docs []keys.Doc
}

func allDocs() []pkgDocs {
	return []pkgDocs{{"keys", keys.Docs}, {"drain", drain.Docs}}
}

// section is one kind's part of the page.
type section struct {
	kind  keys.Kind
	title string
	intro string
	// compact: one table row per name, for names one looks up rather
	// than troubleshoots; else a heading per name.
	compact bool
}

var sections = []section{
	{kind: keys.KindEvent, title: "Event reasons",
		intro: "Events onepool records, by who records them. `kubectl describe <object>` lists an object's recent events; " +
			"`kubectl get events -A --field-selector reason=<reason>` finds one reason everywhere (events about Nodes are in the " +
			"`default` namespace). The API server keeps events for an hour by default (`--event-ttl`)."},
	{kind: keys.KindDrainReason, title: "Slurm drain reasons",
		intro: "What onepool writes into a Slurm node's reason when it drains the node. `sinfo -R` lists drained nodes with " +
			"reason, user and time; `scontrol show node <node>` shows one. Three parts of onepool drain nodes, and each resumes " +
			"only the drains it recorded (the drain annotations below): a drain by anyone else is never resumed or rewritten, " +
			"whatever its words. How a drain's owner is decided: [drain/README.md](../drain/README.md)."},
	{kind: keys.KindNodeCondition, title: "Node condition",
		intro: "`kubectl describe node <node>` lists it under Conditions, with its reason and message."},
	{kind: keys.KindNodeConditionReason, title: "Node condition reasons"},
	{kind: keys.KindNodeSetCondition, title: "NodeSet conditions",
		intro: "`kubectl describe nodeset -n <namespace> <name>`, or `kubectl get nodeset -n <namespace> <name> -o " +
			"jsonpath='{.status.conditions}'`."},
	{kind: keys.KindNodeSetConditionReason, title: "NodeSet condition reasons"},
	{kind: keys.KindTenantPolicyCondition, title: "TenantPolicy condition",
		intro: "`kubectl get tenantpolicies` (`tp`) shows how many namespaces each covers; `kubectl describe tp <name>` the " +
			"condition."},
	{kind: keys.KindTenantPolicyConditionReason, title: "TenantPolicy condition reasons"},
	{kind: keys.KindAnnotation, title: "Annotations",
		intro: "`kubectl get node <node> -o jsonpath='{.metadata.annotations}'` (or `pod`). Those a pod's author sets " +
			"(partition, QOS, account, exclusive, time limit, gang) choose within the namespace's TenantPolicy; " +
			"`onepool.dev/cordon-reason` is yours to set; the others are onepool's records: leave them alone."},
	{kind: keys.KindLabel, title: "Labels"},
	{kind: keys.KindValue, title: "Label and annotation values", compact: true},
	{kind: keys.KindFinalizer, title: "Finalizers",
		intro: "An object stuck in Terminating names what holds it in `metadata.finalizers`."},
	{kind: keys.KindAction, title: "Event actions", compact: true,
		intro: "The `action` of onepool's events (events.k8s.io): what was done, or failed, to the object the event is " +
			"about. `kubectl get events.events.k8s.io -A -o custom-columns=REASON:.reason,ACTION:.action,NOTE:.note`."},
	{kind: keys.KindEnv, title: "Environment variables", compact: true,
		intro: "What the NodeSet sets on the slurmd pod's containers, and the node agent reads (`agent/README.md`)."},
	{kind: keys.KindDRA, title: "GPUs as DRA devices", compact: true,
		intro: "The names of onepool's DRA driver, its devices and claims: `kubectl get resourceslices`, `kubectl get " +
			"resourceclaims -n <namespace>`."},
	{kind: keys.KindPlaceholder, title: "Placeholder jobs", compact: true,
		intro: "The Slurm jobs that hold onepool pods' places (`scheduler/README.md`)."},
	{kind: keys.KindSchedulerName, title: "Scheduler name", compact: true},
}

const intro = `# Troubleshooting: what onepool writes, and what to do

Every event reason, condition, annotation, label, finalizer and Slurm drain reason onepool reads or
writes, what it means and what to do about it, as a Slurm admin or a Kubernetes platform engineer.

Where to look:

- **Events**: ` + "`kubectl describe node|pod|nodeset <name>`" + `; ` + "`kubectl get events -A --field-selector reason=SlurmNodeDrained`" + `;
  every warning, onepool's among them: ` + "`kubectl get events -A --field-selector type=Warning`" + `.
- **A Node as Slurm sees it**: the condition ` + "`SlurmUnavailable`" + ` (` + "`kubectl describe node <node>`" + `) and, for a
  drain onepool did not make, the ` + "`slurm.onepool.dev/*`" + ` annotations; in Slurm, ` + "`scontrol show node <node>`" + `
  (` + "`State=`, `Reason=... [user@time]`" + `) and ` + "`sinfo -R`" + `.
- **A pending onepool pod**: its PodScheduled message (` + "`kubectl describe pod`" + `) says why it waits, e.g.
  ` + "`waiting in Slurm's queue: job 812 is PENDING (Resources)`" + `; ` + "`squeue -j <job>`" + ` with the job id from
  ` + "`slurm.onepool.dev/job-id`" + `.
- **A NodeSet**: ` + "`kubectl get nodesets -n <namespace>`" + ` (pods, Slurm states) and its conditions.
- **The components**: their logs, ` + "`/metrics`" + ` (` + "`onepool_slurmrest_*`" + `), and Warning events on their own pods
  about the Slurm token.

Generated from the name registries (` + "`keys/docs.go`, `drain/docs.go`" + `) by ` + "`make generate`" + `
(` + "`go run ./keys/cmd/gen-troubleshooting`" + `); a test fails when a name has no entry or this page is stale.
Do not edit it by hand.
`

// render is the page for docs, or why it cannot be made.
func render(all []pkgDocs) ([]byte, error) {
	type entry struct {
		pkg string
		doc keys.Doc
	}
	byKind := map[keys.Kind][]entry{}
	known := map[keys.Kind]bool{}
	for _, s := range sections {
		known[s.kind] = true
	}
	for _, p := range all {
		for _, d := range p.docs {
			if !known[d.Kind] {
				return nil, fmt.Errorf("%s.%s: kind %d has no section on the page", p.pkg, d.Name, d.Kind)
			}
			byKind[d.Kind] = append(byKind[d.Kind], entry{p.pkg, d})
		}
	}

	// The headings' anchors, in page order (GitHub numbers repeats).
	anchors := anchorer{}
	sectionAnchor := map[keys.Kind]string{}
	entryAnchor := map[keys.Kind][]string{}
	anchors.of("Troubleshooting: what onepool writes, and what to do")
	for _, s := range sections {
		sectionAnchor[s.kind] = anchors.of(s.title)
		if s.compact {
			continue
		}
		for _, e := range byKind[s.kind] {
			entryAnchor[s.kind] = append(entryAnchor[s.kind], anchors.of(shown(e.doc)))
		}
	}

	var b bytes.Buffer
	b.WriteString("<!-- Code generated by go run ./keys/cmd/gen-troubleshooting; DO NOT EDIT. -->\n\n")
	b.WriteString(intro)
	b.WriteString("\nContents:\n\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "- [%s](#%s) (%d)\n", s.title, sectionAnchor[s.kind], len(byKind[s.kind]))
	}
	for _, s := range sections {
		es := byKind[s.kind]
		fmt.Fprintf(&b, "\n## %s\n", s.title)
		if s.intro != "" {
			fmt.Fprintf(&b, "\n%s\n", s.intro)
		}
		if len(es) == 0 {
			b.WriteString("\nNone.\n")
			continue
		}
		if !s.compact && len(es) >= summaryFrom {
			// An index first: a long section is read by scanning.
			typed := false
			for _, e := range es {
				typed = typed || e.doc.Type != ""
			}
			if typed {
				b.WriteString("\n| name | type | on |\n|---|---|---|\n")
			} else {
				b.WriteString("\n| name | on |\n|---|---|\n")
			}
			for i, e := range es {
				link := fmt.Sprintf("[%s](#%s)", code(shown(e.doc)), entryAnchor[s.kind][i])
				if typed {
					fmt.Fprintf(&b, "| %s | %s | %s |\n", link, cell(cmp.Or(e.doc.Type, "not written")), cell(e.doc.On))
				} else {
					fmt.Fprintf(&b, "| %s | %s |\n", link, cell(e.doc.On))
				}
			}
		}
		if s.compact {
			// A column only where some entry fills it.
			cols := []struct {
				head string
				of   func(keys.Doc) string
			}{
				{"on", func(d keys.Doc) string { return d.On }},
				{"by", func(d keys.Doc) string { return d.By }},
				{"meaning", func(d keys.Doc) string { return d.Means }},
				{"what to do", func(d keys.Doc) string { return d.Do }},
			}
			head, rule := "| name | constant |", "|---|---|"
			var used []func(keys.Doc) string
			for _, c := range cols {
				if slices.ContainsFunc(es, func(e entry) bool { return c.of(e.doc) != "" }) {
					head += " " + c.head + " |"
					rule += "---|"
					used = append(used, c.of)
				}
			}
			fmt.Fprintf(&b, "\n%s\n%s\n", head, rule)
			for _, e := range es {
				fmt.Fprintf(&b, "| %s | `%s.%s` |", code(shown(e.doc)), e.pkg, e.doc.Name)
				for _, of := range used {
					fmt.Fprintf(&b, " %s |", cell(of(e.doc)))
				}
				b.WriteString("\n")
			}
			continue
		}
		for _, e := range es {
			d := e.doc
			fmt.Fprintf(&b, "\n### %s\n\n", code(shown(d)))
			var meta []string
			if d.Type != "" {
				meta = append(meta, "**"+d.Type+"**")
			}
			if d.On != "" {
				meta = append(meta, "on: "+d.On)
			}
			if d.By != "" {
				meta = append(meta, "by: "+d.By)
			}
			meta = append(meta, "`"+e.pkg+"."+d.Name+"`")
			fmt.Fprintf(&b, "%s\n\n%s\n", strings.Join(meta, " · "), d.Means)
			if d.Do != "" {
				fmt.Fprintf(&b, "\n**What to do:** %s\n", d.Do)
			}
		}
	}
	return b.Bytes(), nil
}

// shown is how the name appears.
func shown(d keys.Doc) string {
	if d.Form != "" {
		return d.Form
	}
	return d.Value
}

// code sets s in backticks, enough of them for what s holds.
func code(s string) string {
	ticks := "`"
	for strings.Contains(s, ticks) {
		ticks += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		s = " " + s + " "
	}
	return ticks + s + ticks
}

// cell makes text fit in a table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// summaryFrom is how many entries a section needs for an index.
const summaryFrom = 10

// anchorer gives GitHub's anchors for a page's headings, in order: the
// heading's text lowercased, without punctuation, spaces made hyphens,
// and "-1", "-2", ... on repeats.
type anchorer map[string]int

func (a anchorer) of(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	base := b.String()
	n := a[base]
	a[base] = n + 1
	if n == 0 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, n)
}
