package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// GPU claims in the soak: a second namespace, not labelled out of the GPU
// webhook, whose onepool pods ask nvidia.com/gpu in the dynamic-node
// partition. The webhook turns that into a GPU claim; the soak's NodeSet
// runs the agent's DRA driver, so its nodes publish their GPUs; the
// scheduler allocates each pod's claim the devices of the GRES indices
// Slurm gave its job. At every convergence each bound pod's claim must
// hold exactly those devices, on its node, and no device may be held by
// the claims of two live pods.

// claimsNS is the soak's namespace of pods with GPU claims.
func (s *soak) claimsNS() string { return s.ns + "-claims" }

// opCreateClaimPod creates a onepool pod whose GPUs come through its claim.
func (s *soak) opCreateClaimPod(ctx context.Context) error {
	pods, err := s.inferPods(ctx)
	if err != nil {
		return err
	}
	if len(pods) >= soakMaxPods {
		return s.opDeletePod(ctx)
	}
	_, err = s.kc.CoreV1().Pods(s.claimsNS()).Create(ctx, s.claimPod(fmt.Sprintf("claim-%d", s.step), []int64{1, 2, 4}[s.rng.IntN(3)]), metav1.CreateOptions{})
	return err
}

// claimPod is a soak pod in the claims namespace, in the NodeSet's
// partition: what a user writes (nvidia.com/gpu); the webhook does the rest.
func (s *soak) claimPod(name string, gpus int64) *corev1.Pod {
	p := s.soakPod(gpus)
	p.Name, p.Namespace = name, s.claimsNS()
	p.Annotations[keys.AnnotationJobPartition] = dynPartition
	return p
}

// startClaimPod places one claim pod before the run and waits until it is
// bound and its claim checked: the soak checks claims from its start, and a
// run that could place none fails here, not silently.
func (s *soak) startClaimPod(ctx context.Context) error {
	p, err := s.kc.CoreV1().Pods(s.claimsNS()).Create(ctx, s.claimPod("claim-start", 2), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if len(p.Spec.ResourceClaims) != 1 || p.Spec.ResourceClaims[0].Name != keys.PodClaimGPUs {
		return fmt.Errorf("the GPU webhook did not give %s its GPU claim: claims %+v", p.Name, p.Spec.ResourceClaims)
	}
	ok, last := eventuallyCtx(ctxTimeout(ctx, 2*time.Minute), "the first claim pod bound and its claim checked", func() (bool, string) {
		v, err := s.readSlurm(ctx)
		if err != nil {
			return false, err.Error()
		}
		pods, err := s.kc.CoreV1().Pods(s.claimsNS()).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		problems := s.claimProblems(ctx, v, pods.Items)
		s.mu.Lock()
		checked := len(s.claimsChecked)
		s.mu.Unlock()
		return len(problems) == 0 && checked > 0, fmt.Sprintf("%d checked; %s", checked, strings.Join(problems, "; "))
	})
	if !ok {
		return fmt.Errorf("%s", last)
	}
	return nil
}

// claimProblems: every bound, live claim pod's claim is allocated, reserved
// for it, and holds on its node exactly the devices of its job's GRES
// indices; no device is in the claims of two live pods. Pods checked are
// counted (BENCH soak_claim_pods_checked).
func (s *soak) claimProblems(ctx context.Context, v slurmView, pods []corev1.Pod) []string {
	var live []corev1.Pod
	for _, p := range pods {
		if p.Namespace == s.claimsNS() && p.Spec.NodeName != "" && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rs, err := s.kc.ResourceV1().ResourceSlices().List(rctx, metav1.ListOptions{})
	if err != nil {
		return []string{"resourceslices: " + err.Error()}
	}
	claims, err := s.kc.ResourceV1().ResourceClaims(s.claimsNS()).List(rctx, metav1.ListOptions{})
	if err != nil {
		return []string{"resourceclaims: " + err.Error()}
	}
	gres := gresIndexByDevice(rs.Items)
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	jobs := map[uint32]*slurmrest.Job{}
	for i := range v.jobs {
		jobs[v.jobs[i].ID] = &v.jobs[i]
	}
	var out []string
	holder := map[string]string{} // node/device -> pod
	for _, p := range live {
		problem := func(format string, a ...any) {
			out = append(out, fmt.Sprintf("claim pod %s on %s: ", p.Name, p.Spec.NodeName)+fmt.Sprintf(format, a...))
		}
		name := podClaimName(&p)
		c := byName[name]
		if c == nil || c.Status.Allocation == nil {
			problem("claim %q not allocated", name)
			continue
		}
		if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].UID != p.UID {
			problem("claim %s reserved for %+v", name, c.Status.ReservedFor)
			continue
		}
		id, err := strconv.ParseUint(p.Annotations[keys.AnnotationJobID], 10, 32)
		j := jobs[uint32(id)]
		if err != nil || j == nil || j.State.Base() != slurmrest.JobRunning {
			continue // podProblems says what is wrong with its job
		}
		want, err := j.GPUIndexes(p.Spec.NodeName)
		if err != nil {
			problem("%v", err)
			continue
		}
		var got []int
		for _, r := range c.Status.Allocation.Devices.Results {
			i, ok := gres[p.Spec.NodeName+"/"+r.Device]
			if r.Driver != keys.GPUDriverName || r.Pool != p.Spec.NodeName || !ok {
				problem("claim %s holds %s/%s/%s, no GPU of its node", name, r.Driver, r.Pool, r.Device)
				continue
			}
			got = append(got, i)
			k := p.Spec.NodeName + "/" + r.Device
			if other, dup := holder[k]; dup {
				out = append(out, fmt.Sprintf("GPU %s in the claims of pods %s and %s", k, other, p.Name))
			}
			holder[k] = p.Name
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			problem("claim %s holds GRES indices %v, job %d has %v", name, got, j.ID, want)
			continue
		}
		s.mu.Lock()
		s.claimsChecked[p.UID] = true
		s.mu.Unlock()
	}
	return out
}

// gresIndexByDevice maps "node/device" to the GRES index onepool's driver
// publishes for it.
func gresIndexByDevice(rs []resourceapi.ResourceSlice) map[string]int {
	out := map[string]int{}
	for _, sl := range rs {
		if sl.Spec.Driver != keys.GPUDriverName || sl.Spec.NodeName == nil {
			continue
		}
		for _, d := range sl.Spec.Devices {
			if a := d.Attributes[keys.GPUAttrGresIndex].IntValue; a != nil {
				out[*sl.Spec.NodeName+"/"+d.Name] = int(*a)
			}
		}
	}
	return out
}
