// Package drain owns onepool's drains of Slurm nodes: the reasons each part
// of onepool writes into a node's reason field, the record a part keeps of
// a drain it made (Record), how Slurm's text is compared with that record
// (Matches, SlurmAppended, Shows), and who owns a drain (Form, Owner).
//
// Three writers share Slurm's reason field: the syncer (a Node cordoned, a
// slurmd pod deleted or not ready), the NodeSet controller (a rolling
// update, a Node leaving the NodeSet) and the node agent (a failed GPU
// health check). Anyone else's drain is an admin's, even in onepool's
// words. The annotation keys that hold the records are names, and live in
// package keys.
package drain

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Drain reasons. Every drain onepool makes starts with Prefix. The taxonomy:
//
//	onepool: node cordoned[: <operator's words>]   syncer: the Node is cordoned
//	onepool: slurmd pod deleted                    syncer: the slurmd pod is going away
//	onepool: slurmd pod not ready                  syncer: not Ready for longer than the grace
//	onepool: nodeset update                        NodeSet: it replaces the slurmd pod (new template)
//	onepool: node left nodeset <name>              NodeSet: the Node no longer matches the NodeSet
//	onepool: mig config <layout>                   NodeSet: the Node asks another MIG layout (its slurmd pod goes, the layout is applied, a new pod registers)
//	onepool: gpu <check>: <detail>                 agent: a GPU health check failed
//
// Each drain belongs to the part of onepool that made it, and only that part
// resumes it: the syncer its three reasons, the NodeSet controller its own.
// GPU health drains are never resumed by onepool: an admin resumes the node
// after fixing the GPU. The text alone proves nothing (an admin may type
// it): the syncer and the NodeSet decide from their records (Records.Owner)
// and use the text only as a cross-check.
const (
	Prefix              = "onepool: "
	ReasonCordoned      = Prefix + "node cordoned"
	ReasonPodDeleted    = Prefix + "slurmd pod deleted"
	ReasonPodNotReady   = Prefix + "slurmd pod not ready"
	ReasonNodeSetUpdate = Prefix + "nodeset update"
	ReasonNodeSetLeft   = Prefix + "node left nodeset" // + " <name>": LeftReason
	ReasonMIGConfig     = Prefix + "mig config"        // + " <layout>": MIGConfigReason
	ReasonGPUPrefix     = Prefix + "gpu "              // + "<check>: <detail>": HealthReason
	operatorReasonJoin  = ": "
	// MaxOperatorReason bounds the operator's words in a cordon's drain
	// reason, in bytes; longer words are cut there (on a UTF-8 boundary)
	// and end with TruncatedMark.
	MaxOperatorReason = 200
	TruncatedMark     = "…"
	// maxHealthReason keeps the agent's reasons short: Slurm shows them in
	// sinfo -R and onepool copies them into annotations and conditions.
	maxHealthReason = 199
)

// CordonReason builds the syncer's drain reason for a cordon with the
// operator's words (may be empty). Control characters become spaces and
// words longer than MaxOperatorReason bytes are cut on a UTF-8 boundary and
// marked with TruncatedMark; note then says what was changed ("" when
// nothing was).
func CordonReason(words string) (reason, note string) {
	words = strings.TrimSpace(words)
	if words == "" {
		return ReasonCordoned, ""
	}
	var notes []string
	if strings.ContainsFunc(words, isControl) {
		words = strings.TrimSpace(strings.Map(func(r rune) rune {
			if isControl(r) {
				return ' '
			}
			return r
		}, words))
		notes = append(notes, "control characters replaced by spaces")
	}
	if len(words) > MaxOperatorReason {
		cut := MaxOperatorReason - len(TruncatedMark)
		for cut > 0 && !utf8.RuneStart(words[cut]) {
			cut--
		}
		words = strings.TrimSpace(words[:cut]) + TruncatedMark
		notes = append(notes, fmt.Sprintf("cut to %d bytes", MaxOperatorReason))
	}
	if words == "" {
		return ReasonCordoned, strings.Join(notes, "; ")
	}
	return ReasonCordoned + operatorReasonJoin + words, strings.Join(notes, "; ")
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }

// LeftReason is the NodeSet controller's drain reason for a Node that left
// the NodeSet named nodeSet.
func LeftReason(nodeSet string) string { return ReasonNodeSetLeft + " " + nodeSet }

// MIGConfigReason is the NodeSet controller's drain reason for a Node
// whose MIG layout is to change to layout (keys.LabelMIGConfig).
func MIGConfigReason(layout string) string { return ReasonMIGConfig + " " + layout }

// ReplacesPod says the reason is one of the NodeSet controller's drains
// that replace the node's slurmd pod while the Node stays in the NodeSet:
// a rolling update, a MIG layout change. Slurm's own cause may follow.
func ReplacesPod(reason string) bool {
	return Shows(reason, ReasonNodeSetUpdate) || strings.HasPrefix(reason, ReasonMIGConfig+" ")
}

// HealthReason is the node agent's drain reason for a failed GPU health
// check: ReasonGPUPrefix + "<check>: <detail>", double quotes turned into
// single ones, control characters into spaces, cut to 199 bytes (ending
// "...").
func HealthReason(check, detail string) string {
	r := ReasonGPUPrefix + check + ": " + detail
	r = strings.Map(func(c rune) rune {
		switch {
		case c == '"':
			return '\''
		case c < 0x20 || c == 0x7f:
			return ' '
		}
		return c
	}, r)
	if len(r) > maxHealthReason {
		r = r[:maxHealthReason-3] + "..."
	}
	return r
}
