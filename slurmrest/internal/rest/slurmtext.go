package rest

import (
	"net/http"
	"strings"

	"github.com/onepool/onepool/slurmrest/model"
)

// Slurm tells onepool two outcomes only in English: no error number and no
// HTTP status sets them apart from other failures. They are matched here
// and nowhere else, each checked against recordings of every release that
// answers it (slurmtext_test.go); everything else is decided by error
// number or HTTP status (model.Classify).
//
//   - An unknown node, read alone: HTTP 200, no node, error number 0 and
//     "Failure to query node <name>" (24.11 and 26.05).
//   - 24.11.5's node delta where nodes changed and partitions did not: HTTP
//     500, error number -1, "Unable to query partitions" (a slurmrestd bug;
//     26.05 answers such a delta with the nodes).
const (
	textUnknownNode       = "Failure to query node"
	textPartitionQueryBug = "Unable to query partitions"
)

// isUnknownNode says a node read failed only because Slurm has no such node.
func isUnknownNode(ae *model.APIError) bool {
	return ae.StatusCode == http.StatusOK && len(ae.Errors) > 0 &&
		ae.Errors[0].Errno == 0 && strings.HasPrefix(ae.Errors[0].Description, textUnknownNode)
}

// isPartitionQueryBug says a node delta failed with 24.11.5's bug, meaning
// "nodes changed".
func isPartitionQueryBug(ae *model.APIError) bool {
	if ae.StatusCode != http.StatusInternalServerError {
		return false
	}
	for _, e := range ae.Errors {
		if strings.Contains(e.Description, textPartitionQueryBug) {
			return true
		}
	}
	return false
}
