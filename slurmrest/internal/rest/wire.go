package rest

// The JSON onepool reads from and writes to slurmrestd, field by field: only
// the fields onepool uses. They are the same in every version this package
// speaks (v0.0.42, v0.0.44): TestWireMatchesGeneratedTypes holds each of
// them against the types generated from each version's spec
// (internal/gen/v00xx, `make generate`), so a version that renamed or
// retyped one fails there before it reaches a cluster.

// noVal32 and noVal64 are Slurm's {set, infinite, number}.
type noVal32 struct {
	Set      *bool  `json:"set,omitempty"`
	Infinite *bool  `json:"infinite,omitempty"`
	Number   *int64 `json:"number,omitempty"`
}

type noVal64 = noVal32

// apiError is one entry of an answer's `errors` array.
type apiError struct {
	ErrorNumber *int32  `json:"error_number,omitempty"`
	Error       *string `json:"error,omitempty"`
	Description *string `json:"description,omitempty"`
	Source      *string `json:"source,omitempty"`
}

// envelope is what every answer carries besides its data.
type envelope struct {
	Errors []apiError `json:"errors"`
}

type wireNode struct {
	Name            *string   `json:"name,omitempty"`
	Hostname        *string   `json:"hostname,omitempty"`
	Address         *string   `json:"address,omitempty"`
	State           *[]string `json:"state,omitempty"`
	Reason          *string   `json:"reason,omitempty"`
	ReasonSetByUser *string   `json:"reason_set_by_user,omitempty"`
	ReasonChangedAt *noVal64  `json:"reason_changed_at,omitempty"`
	Partitions      *[]string `json:"partitions,omitempty"`
	Features        *[]string `json:"features,omitempty"`
	Cpus            *int32    `json:"cpus,omitempty"`
	RealMemory      *int64    `json:"real_memory,omitempty"`
	Gres            *string   `json:"gres,omitempty"`
	GresUsed        *string   `json:"gres_used,omitempty"`
	Comment         *string   `json:"comment,omitempty"`
	BootTime        *noVal64  `json:"boot_time,omitempty"`
	SlurmdStartTime *noVal64  `json:"slurmd_start_time,omitempty"`
	Version         *string   `json:"version,omitempty"`
}

type nodesResp struct {
	Nodes      []wireNode `json:"nodes"`
	LastUpdate noVal64    `json:"last_update"`
}

type updateNodeMsg struct {
	Comment     *string   `json:"comment,omitempty"`
	Features    *[]string `json:"features,omitempty"`
	FeaturesAct *[]string `json:"features_act,omitempty"`
	Name        *[]string `json:"name,omitempty"`
	Reason      *string   `json:"reason,omitempty"`
	State       *[]string `json:"state,omitempty"`
}

type wirePartition struct {
	Name  *string `json:"name,omitempty"`
	Nodes *struct {
		Configured *string `json:"configured,omitempty"`
		Total      *int32  `json:"total,omitempty"`
	} `json:"nodes,omitempty"`
	Cpus *struct {
		Total *int32 `json:"total,omitempty"`
	} `json:"cpus,omitempty"`
	Partition *struct {
		State *[]string `json:"state,omitempty"`
	} `json:"partition,omitempty"`
}

type partitionsResp struct {
	Partitions []wirePartition `json:"partitions"`
}

type wireJobResNode struct {
	Index int32  `json:"index"`
	Name  string `json:"name"`
}

type wireJob struct {
	JobId       *int64    `json:"job_id,omitempty"`
	Name        *string   `json:"name,omitempty"`
	UserName    *string   `json:"user_name,omitempty"`
	Account     *string   `json:"account,omitempty"`
	Partition   *string   `json:"partition,omitempty"`
	Qos         *string   `json:"qos,omitempty"`
	JobState    *[]string `json:"job_state,omitempty"`
	StateReason *string   `json:"state_reason,omitempty"`
	Nodes       *string   `json:"nodes,omitempty"`
	Comment     *string   `json:"comment,omitempty"`
	Priority    *noVal32  `json:"priority,omitempty"`
	SubmitTime  *noVal64  `json:"submit_time,omitempty"`
	StartTime   *noVal64  `json:"start_time,omitempty"`
	EndTime     *noVal64  `json:"end_time,omitempty"`
	PreemptTime *noVal64  `json:"preempt_time,omitempty"`
	TimeLimit   *noVal32  `json:"time_limit,omitempty"` // minutes; infinite for UNLIMITED
	TresPerNode *string   `json:"tres_per_node,omitempty"`
	GresDetail  *[]string `json:"gres_detail,omitempty"`
	ExitCode    *struct {
		ReturnCode *noVal32 `json:"return_code,omitempty"`
	} `json:"exit_code,omitempty"`
	JobResources *struct {
		Nodes *struct {
			Allocation *[]wireJobResNode `json:"allocation,omitempty"`
		} `json:"nodes,omitempty"`
	} `json:"job_resources,omitempty"`
}

type jobsResp struct {
	Jobs       []wireJob `json:"jobs"`
	LastUpdate noVal64   `json:"last_update"`
}

// jobDesc is a job's description in a submission, an allocation request
// and an update.
type jobDesc struct {
	Name                    *string   `json:"name,omitempty"`
	Environment             *[]string `json:"environment,omitempty"`
	CurrentWorkingDirectory *string   `json:"current_working_directory,omitempty"`
	Partition               *string   `json:"partition,omitempty"`
	Nodes                   *string   `json:"nodes,omitempty"`
	Tasks                   *int32    `json:"tasks,omitempty"`
	TresPerNode             *string   `json:"tres_per_node,omitempty"`
	Comment                 *string   `json:"comment,omitempty"`
	TimeLimit               *noVal32  `json:"time_limit,omitempty"`
	Hold                    *bool     `json:"hold,omitempty"`
	Priority                *noVal32  `json:"priority,omitempty"`
	Qos                     *string   `json:"qos,omitempty"`
	Account                 *string   `json:"account,omitempty"`
	CpusPerTask             *int32    `json:"cpus_per_task,omitempty"`
	MemoryPerNode           *noVal64  `json:"memory_per_node,omitempty"`
	Requeue                 *bool     `json:"requeue,omitempty"`
	Shared                  *[]string `json:"shared,omitempty"`
	Immediate               *bool     `json:"immediate,omitempty"`
	ExcludedNodes           *[]string `json:"excluded_nodes,omitempty"`
	Script                  *string   `json:"script,omitempty"`
}

// jobReq is the body of a submission and of an allocation request.
type jobReq struct {
	Job *jobDesc `json:"job,omitempty"`
}

// jobIDResp is the answer to a submission and to an allocation request.
type jobIDResp struct {
	JobId *int64 `json:"job_id,omitempty"`
}

type jobPostResp struct {
	Results *[]struct {
		Error     *string `json:"error,omitempty"`
		ErrorCode *int32  `json:"error_code,omitempty"`
	} `json:"results,omitempty"`
}

type killJobResp struct {
	Status []struct {
		Error *struct {
			Code    *int32  `json:"code,omitempty"`
			Message *string `json:"message,omitempty"`
			String  *string `json:"string,omitempty"`
		} `json:"error,omitempty"`
	} `json:"status"`
}

// slurmdbd's objects (/slurmdb/<version>/...). A change to an existing QOS
// or association sends back the whole object as slurmrestd listed it, with
// onepool's fields changed (slurmdb.go says why); these types are what
// onepool reads and what it sends for a new one.

type wireTRES struct {
	Type  string  `json:"type"`
	Name  *string `json:"name,omitempty"`
	Count *int64  `json:"count,omitempty"`
}

type wireQOS struct {
	Name        *string   `json:"name,omitempty"`
	Description *string   `json:"description,omitempty"`
	Flags       *[]string `json:"flags,omitempty"`
	Priority    *noVal32  `json:"priority,omitempty"`
	Limits      *struct {
		GraceTime *int64 `json:"grace_time,omitempty"`
		Max       *struct {
			Tres *struct {
				Per *struct {
					User *[]wireTRES `json:"user,omitempty"`
				} `json:"per,omitempty"`
			} `json:"tres,omitempty"`
		} `json:"max,omitempty"`
	} `json:"limits,omitempty"`
	Preempt *struct {
		List *[]string `json:"list,omitempty"`
		Mode *[]string `json:"mode,omitempty"`
	} `json:"preempt,omitempty"`
}

type qosResp struct {
	Qos []wireQOS `json:"qos"`
}

type wireAssoc struct {
	Cluster   *string   `json:"cluster,omitempty"`
	Account   *string   `json:"account,omitempty"`
	User      string    `json:"user"`
	Partition *string   `json:"partition,omitempty"`
	Qos       *[]string `json:"qos,omitempty"`
	Default   *struct {
		Qos *string `json:"qos,omitempty"`
	} `json:"default,omitempty"`
}

type assocsResp struct {
	Associations []wireAssoc `json:"associations"`
}

type wireCluster struct {
	Name *string `json:"name,omitempty"`
}

type clustersResp struct {
	Clusters []wireCluster `json:"clusters"`
}

// accountsAddReq is POST /accounts_association/: accounts and their
// associations on clusters (sacctmgr add account).
type accountsAddReq struct {
	AssociationCondition *accountsAddCond `json:"association_condition,omitempty"`
	Account              *accountShort    `json:"account,omitempty"`
}

type accountsAddCond struct {
	Accounts []string  `json:"accounts"`
	Clusters *[]string `json:"clusters,omitempty"`
}

type accountShort struct {
	Description  *string `json:"description,omitempty"`
	Organization *string `json:"organization,omitempty"`
}

// usersAddReq is POST /users_association/: users and their associations
// (sacctmgr add user). User is required and left empty: a new user's
// default account is the association's, an existing user's stays.
type usersAddReq struct {
	AssociationCondition usersAddCond `json:"association_condition"`
	User                 struct{}     `json:"user"`
}

type usersAddCond struct {
	Accounts    *[]string    `json:"accounts,omitempty"`
	Clusters    *[]string    `json:"clusters,omitempty"`
	Users       []string     `json:"users"`
	Association *assocRecSet `json:"association,omitempty"`
}

// assocRecSet is what a new association is made with.
type assocRecSet struct {
	Defaultqos *string   `json:"defaultqos,omitempty"`
	Qoslevel   *[]string `json:"qoslevel,omitempty"`
}
