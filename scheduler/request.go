package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/slurmrest/model"
	"github.com/onepool/onepool/tenancy"
)

// grantTo narrows a request read from the pod to what its TenantPolicy
// grants: the Slurm user, and the policy's defaults where the pod named
// nothing (the scheduler's defaults stay where the policy has none).
func grantTo(r request, g tenancy.Grant) request {
	r.Policy, r.User = g.Policy, g.SlurmUser
	for _, f := range []struct {
		dst *string
		v   string
	}{{&r.Partition, g.Partition}, {&r.QOS, g.QOS}, {&r.Account, g.Account}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if g.Exclusive != "" {
		if s, err := parseExclusive(g.Exclusive); err == nil {
			r.Sharing = s
		}
	}
	return r
}

// ResourceGPU is the extended resource a pod asks GPUs with.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// ResourceMIGPrefix + a MIG profile (nvidia.com/mig-1g.10gb) asks MIG
// devices of that profile.
const ResourceMIGPrefix = "nvidia.com/mig-"

// request is what one pod asks of Slurm.
type request struct {
	// Policy is the TenantPolicy that allowed it ("" none applied) and
	// User the Slurm user its job runs as ("" onepool's own).
	Policy    string
	User      string
	Partition string
	QOS       string
	Account   string
	TimeLimit time.Duration // 0: the partition's
	Sharing   slurmrest.JobSharing
	GPUs      int64
	// GPUType is the GRES type the GPUs must be (a MIG profile); "": any.
	GPUType  string
	CPUs     int   // whole CPUs, at least 1
	MemoryMB int64 // 0: Slurm's default
}

// requestFor reads a pod's resources and annotations; the error says which
// annotation or request is wrong, in words for a pod event.
func requestFor(pod *corev1.Pod, a *Args) (request, error) {
	r := request{
		Partition: a.DefaultPartition,
		QOS:       a.DefaultQOS,
		Account:   a.DefaultAccount,
		TimeLimit: a.DefaultTimeLimit.Duration,
	}
	for ann, dst := range map[string]*string{keys.AnnotationJobPartition: &r.Partition, keys.AnnotationJobQOS: &r.QOS, keys.AnnotationJobAccount: &r.Account} {
		if v, ok := pod.Annotations[ann]; ok {
			if !slurmName.MatchString(v) {
				return request{}, fmt.Errorf("annotation %s=%q: not a Slurm name (letters, digits, '_', '.', '-'; at most 64)", ann, v)
			}
			*dst = v
		}
	}
	if v, ok := pod.Annotations[keys.AnnotationJobTimeLimit]; ok {
		d, err := parseTimeLimit(v)
		if err != nil {
			return request{}, fmt.Errorf("annotation %s=%q: %w", keys.AnnotationJobTimeLimit, v, err)
		}
		r.TimeLimit = d
	}
	excl := a.DefaultExclusive
	if v, ok := pod.Annotations[keys.AnnotationJobExclusive]; ok {
		excl = v
	}
	sharing, err := parseExclusive(excl)
	if err != nil {
		return request{}, fmt.Errorf("annotation %s=%q: want one of %s", keys.AnnotationJobExclusive, excl, strings.Join(exclusiveValues, ", "))
	}
	r.Sharing = sharing
	if max := a.MaxTimeLimit.Duration; max > 0 && (r.TimeLimit == 0 || r.TimeLimit > max) {
		if r.TimeLimit > max {
			return request{}, fmt.Errorf("annotation %s=%s: exceeds the maximum %s", keys.AnnotationJobTimeLimit, timeLimitText(r.TimeLimit), max)
		}
		r.TimeLimit = max
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if q, ok := req[ResourceGPU]; ok {
		r.GPUs = q.Value()
	}
	if err := migGPUs(req, &r); err != nil {
		return request{}, err
	}
	if err := claimGPUs(pod, &r); err != nil {
		return request{}, err
	}
	if r.GPUs < 0 || r.GPUs > 1024 {
		return request{}, fmt.Errorf("%s request %d is out of range", ResourceGPU, r.GPUs)
	}
	cpu := req.Cpu()
	r.CPUs = max(1, int((cpu.MilliValue()+999)/1000))
	if mem := req.Memory(); !mem.IsZero() {
		r.MemoryMB = (mem.Value() + (1<<20 - 1)) >> 20
	}
	return r, nil
}

// parseTimeLimit reads a time-limit annotation: a Go duration of at least
// a minute, or UNLIMITED (Slurm's word; INFINITE too) for no limit.
func parseTimeLimit(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "UNLIMITED") || strings.EqualFold(v, "INFINITE") {
		return slurmrest.UnlimitedTime, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		return 0, errors.New("want a duration of at least 1m, such as 90m or 12h, or UNLIMITED")
	}
	return d, nil
}

// timeLimitText is a time limit as a user wrote it.
func timeLimitText(d time.Duration) string {
	if d == slurmrest.UnlimitedTime {
		return "UNLIMITED"
	}
	return d.String()
}

// exclusiveValues are the node sharing modes a pod may ask.
var exclusiveValues = []string{"none", "node", "user"}

// parseExclusive maps an exclusive mode to Slurm's sharing ("": none).
func parseExclusive(v string) (slurmrest.JobSharing, error) {
	switch strings.TrimSpace(v) {
	case "", "none":
		return slurmrest.SharingDefault, nil
	case "node":
		return slurmrest.SharingExclusive, nil
	case "user":
		return slurmrest.SharingUser, nil
	}
	return "", fmt.Errorf("unknown exclusive mode %q", v)
}

// claimGPUs reads the GPU count of a pod with an onepool GPU claim from
// keys.AnnotationGPUs; such a pod must not also ask nvidia.com/gpu.
func claimGPUs(pod *corev1.Pod, r *request) error {
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name != keys.PodClaimGPUs {
			// kube-scheduler's DynamicResources plugin is off in onepool's
			// profile: nothing would ever allocate it.
			return fmt.Errorf("resource claim %q: onepool allocates only its own GPU claim %q (ask GPUs as %s)", rc.Name, keys.PodClaimGPUs, ResourceGPU)
		}
	}
	v, annotated := pod.Annotations[keys.AnnotationGPUs]
	_, claimed, _ := gpuClaimName(pod)
	switch {
	case !claimed && !annotated:
		return nil
	case !claimed:
		return fmt.Errorf("annotation %s is only for a pod with the resource claim %q", keys.AnnotationGPUs, keys.PodClaimGPUs)
	case !annotated:
		return fmt.Errorf("the resource claim %q needs the annotation %s (the GPU count)", keys.PodClaimGPUs, keys.AnnotationGPUs)
	case r.GPUs > 0:
		return fmt.Errorf("asks GPUs twice: %s and the resource claim %q", ResourceGPU, keys.PodClaimGPUs)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("annotation %s=%q: want a GPU count of at least 1", keys.AnnotationGPUs, v)
	}
	r.GPUs = n
	if t, ok := pod.Annotations[keys.AnnotationGPUType]; ok {
		if !model.ValidGresType(t) {
			return fmt.Errorf("annotation %s=%q: not a GRES type (lowercase letters, digits, '.', '_')", keys.AnnotationGPUType, t)
		}
		r.GPUType = t
	}
	return nil
}

// migGPUs reads a pod's nvidia.com/mig-<profile> request (a pod the
// webhook did not convert): MIG devices of that profile, one profile per
// pod and not beside nvidia.com/gpu.
func migGPUs(req corev1.ResourceList, r *request) error {
	for name, q := range req {
		profile, ok := strings.CutPrefix(string(name), ResourceMIGPrefix)
		if !ok || q.IsZero() {
			continue
		}
		if r.GPUs > 0 {
			return fmt.Errorf("asks %s beside other GPUs: one pod's GPUs are one kind", name)
		}
		r.GPUType = model.MIGProfileType(profile)
		if !model.ValidGresType(r.GPUType) {
			return fmt.Errorf("%s: %q is not a MIG profile (such as 1g.10gb)", name, profile)
		}
		r.GPUs = q.Value()
	}
	return nil
}

// jobFor builds the placeholder job for an owner whose pods each ask req,
// one pod per node over nodes nodes; comment is the owner's, signed.
func jobFor(o owner, comment string, req request, nodes int, a *Args, script string) slurmrest.JobSubmit {
	j := slurmrest.JobSubmit{
		Name:            o.jobName(),
		Comment:         comment,
		Script:          script,
		Partition:       req.Partition,
		QOS:             req.QOS,
		Account:         req.Account,
		TimeLimit:       req.TimeLimit,
		Nodes:           fmt.Sprint(nodes),
		Tasks:           nodes,
		CPUsPerTask:     req.CPUs,
		MemoryPerNodeMB: req.MemoryMB,
		WorkDir:         a.WorkDir,
		Environment:     []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		NoRequeue:       true,
		Sharing:         req.Sharing,
	}
	switch {
	case req.GPUs > 0 && req.GPUType != "":
		j.TresPerNode = fmt.Sprintf("gres/gpu:%s:%d", req.GPUType, req.GPUs)
	case req.GPUs > 0:
		j.TresPerNode = fmt.Sprintf("gres/gpu:%d", req.GPUs)
	}
	return j
}

// sameShape says whether two gang members ask the same of Slurm: one job
// gives every node the same allocation.
func sameShape(a, b request) bool { return a == b }
