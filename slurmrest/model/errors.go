package model

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kinds of failure callers decide on, matched with errors.Is.
var (
	// ErrUnauthenticated: no token, or slurmrestd refused it (HTTP 401, or
	// 511 / Slurm error 1007 for an expired or garbled token).
	ErrUnauthenticated = errors.New("slurmrest: unauthenticated")
	// ErrForbidden: the token's user may not do this (Slurm error 2010).
	ErrForbidden = errors.New("slurmrest: not allowed")
	// ErrNotFound: no such node or job.
	ErrNotFound = errors.New("slurmrest: not found")
	// ErrAlreadyInState: Slurm refused a state change it found no
	// transition for (2028 on 24.11, 2180 on 26.05): the object may be in
	// that state already, or unable to leave its own. Client.Resume reads
	// the node back and never returns it.
	ErrAlreadyInState = errors.New("slurmrest: already in that state")
	// ErrUnreachable: slurmrestd did not answer (refused, reset, deadline).
	ErrUnreachable = errors.New("slurmrest: unreachable")
	// ErrBadResponse: slurmrestd answered something onepool cannot read.
	ErrBadResponse = errors.New("slurmrest: bad response")
	// ErrSlurm: Slurm reported an error none of the kinds above covers.
	ErrSlurm = errors.New("slurmrest: slurm error")
	// ErrNoToken: the token file is missing, empty or holds no single token.
	ErrNoToken = errors.New("slurmrest: no token in the token file")
	// ErrStale: the cache has not refreshed within its bound; the answer is
	// unknown, not empty.
	ErrStale = errors.New("slurmrest: cache is stale")
	// ErrUnsupportedVersion: slurmrestd serves no REST API version onepool
	// speaks (the error names both lists).
	ErrUnsupportedVersion = errors.New("slurmrest: no REST API version in common")
	// ErrNotWatched: a cache read of a kind the cache does not list
	// (CacheConfig.Watch); a wiring mistake, never an answer about Slurm.
	ErrNotWatched = errors.New("slurmrest: the cache does not list that kind")
)

// Slurm error numbers onepool recognises (slurm/slurm_errno.h; the same
// numbers in 24.11 and 26.05).
const (
	ErrnoProtocolAuth    = 1007 // bad or expired credential
	ErrnoAccessDenied    = 2010
	ErrnoInvalidJobID    = 2017
	ErrnoInvalidNodeName = 2018
	ErrnoInvalidNodeSt   = 2028
	// ErrnoNodeStTransition (ESLURM_INVALID_NODE_STATE_TRANSITION, new in
	// 26.05) is 26.05's answer, with HTTP 422, to resuming a node that is
	// not drained, where 24.11 answers 2028.
	ErrnoNodeStTransition = 2180
	ErrnoAlreadyDone      = 2021 // job already finished

	// Why Slurm refuses a job submission.
	ErrnoInvalidPartition      = 2000 // ESLURM_INVALID_PARTITION_NAME
	ErrnoTooManyCPUs           = 2005 // ESLURM_TOO_MANY_REQUESTED_CPUS
	ErrnoInvalidNodeCount      = 2006 // ESLURM_INVALID_NODE_COUNT
	ErrnoNotTopPriority        = 2013 // ESLURM_NOT_TOP_PRIORITY: an immediate allocation would pass a higher-priority job
	ErrnoNodeConfigUnavailable = 2014 // ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE: no node can ever run it
	ErrnoPartConfigUnavailable = 2015 // ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE
	ErrnoNodesBusy             = 2016 // ESLURM_NODES_BUSY: an immediate allocation finds no free resources
	ErrnoInvalidAccount        = 2045 // ESLURM_INVALID_ACCOUNT
	ErrnoAccountingPolicy      = 2050 // ESLURM_ACCOUNTING_POLICY: a limit of the association or QOS
	ErrnoInvalidTimeLimit      = 2051 // ESLURM_INVALID_TIME_LIMIT
	ErrnoInvalidQOS            = 2066 // ESLURM_INVALID_QOS
	ErrnoPartitionNotAvail     = 2070 // ESLURM_PARTITION_NOT_AVAIL
	ErrnoInvalidGRES           = 2072 // ESLURM_INVALID_GRES
)

// SlurmError is one entry of the `errors` array of a response.
type SlurmError struct {
	Errno       int
	Error       string
	Description string
	Source      string
}

// APIError is a failed slurmrestd call. It never holds the token.
type APIError struct {
	Op         string // "drain node gpu-1"
	Endpoint   string // "POST /slurm/v0.0.42/node/{node_name}"
	StatusCode int    // 0 when no answer came
	Errors     []SlurmError
	Kind       error // one of the Err* kinds
	Err        error // the cause (transport or decode error), may be nil
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slurmrest: %s", e.Op)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	}
	for i, se := range e.Errors {
		if i == 3 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Errors)-3)
			break
		}
		fmt.Fprintf(&b, "; slurm error %d", se.Errno)
		if msg := cmp.Or(se.Description, se.Error); msg != "" {
			fmt.Fprintf(&b, ": %s", msg)
		}
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Is matches the error's kind.
func (e *APIError) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// Unwrap returns the cause.
func (e *APIError) Unwrap() error { return e.Err }

// FirstErrno returns the first Slurm error number reported, 0 if none.
func (e *APIError) FirstErrno() int {
	for _, se := range e.Errors {
		if se.Errno != 0 {
			return se.Errno
		}
	}
	return 0
}

// HasErrno says whether Slurm reported errno.
func (e *APIError) HasErrno(errno int) bool {
	return slices.ContainsFunc(e.Errors, func(se SlurmError) bool { return se.Errno == errno })
}

// Classify picks the kind of a response from its status and Slurm errors.
func Classify(status int, errs []SlurmError) error {
	has := func(n int) bool { return slices.ContainsFunc(errs, func(se SlurmError) bool { return se.Errno == n }) }
	switch {
	case status == 401 || status == 511 || has(ErrnoProtocolAuth):
		return ErrUnauthenticated
	case status == 403 || has(ErrnoAccessDenied):
		return ErrForbidden
	case has(ErrnoInvalidNodeSt) || has(ErrnoNodeStTransition):
		return ErrAlreadyInState
	case status == 404 || has(ErrnoInvalidJobID) || has(ErrnoInvalidNodeName):
		return ErrNotFound
	case status == 502 || status == 503 || status == 504:
		return ErrUnreachable
	default:
		return ErrSlurm
	}
}
