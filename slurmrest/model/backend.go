package model

import (
	"context"
	"time"
)

// Backend is what onepool asks of slurmrestd, in any API version: the
// adapter (internal/rest) implements it; nothing above it sees a version.
type Backend interface {
	Ping(ctx context.Context) error
	// ListNodes returns all nodes, or nil and no error when nothing changed
	// since "since" (zero: always list).
	ListNodes(ctx context.Context, since time.Time) (*NodeList, error)
	GetNode(ctx context.Context, name string) (*Node, error)
	UpdateNode(ctx context.Context, name string, u NodeUpdate) error
	UpdateNodes(ctx context.Context, names []string, u NodeUpdate) error
	// DeleteNode removes a dynamic node's record (scontrol delete nodename).
	DeleteNode(ctx context.Context, name string) error
	// ListJobs is like ListNodes for jobs; the list holds the jobs keep
	// accepts (nil: all), read as the answer streams in.
	ListJobs(ctx context.Context, since time.Time, keep func(*Job) bool) (*JobList, error)
	GetJob(ctx context.Context, id uint32) (*Job, error)
	JobStates(ctx context.Context, ids []uint32) ([]JobStateEntry, error)
	SubmitJob(ctx context.Context, j JobSubmit) (uint32, error)
	AllocateNow(ctx context.Context, j JobSubmit) (uint32, error)
	UpdateJob(ctx context.Context, id uint32, u JobUpdate) error
	CancelJob(ctx context.Context, id uint32, signal string) error
	ListPartitions(ctx context.Context) ([]Partition, error)

	// Accounting: slurmdbd's endpoints (slurmrestd's openapi/slurmdbd plugin).
	ListClusters(ctx context.Context) ([]string, error)
	ListQOS(ctx context.Context) ([]QOS, error)
	// SetQOS makes the QOS when missing (it says so), else sets u's fields.
	SetQOS(ctx context.Context, name string, u QOSUpdate) (bool, error)
	ListAssociations(ctx context.Context, cluster string) ([]Association, error)
	AddAccount(ctx context.Context, cluster string, a Account) error
	AddUserAssociation(ctx context.Context, a Association) error
	UpdateAssociation(ctx context.Context, key Association, u AssociationUpdate) error
}
