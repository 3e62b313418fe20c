package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler"
	"github.com/onepool/onepool/test/lab"
)

// A tenant's gang is the team's, and its size is not the tenant's to say.
// With the tenant's own credentials (edit in its namespace), pods naming a
// PodGroup the platform team made get one Slurm job for the whole gang, as
// the team's Slurm user and account with the policy's QOS, like any of the
// team's pods. Pods naming a PodGroup that does not exist get no job (a
// gang's size comes from the object, never from its pods) and say why.
func TestTrustTenantGangIsTheTeams(t *testing.T) {
	e := newTeamBEnv(t, 8, 0)
	ctx := context.Background()
	cfg, err := e.l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "pair", "namespace": e.ns},
		"spec":     map[string]any{"minMember": int64(2)},
	}}
	if _, err := dynamic.NewForConfigOrDie(cfg).Resource(scheduler.PodGroupGVR).Namespace(e.ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	member := func(name, group string) {
		p := e.pod(name, 1, nil)
		p.Labels = map[string]string{keys.LabelPodGroup: group}
		if _, err := e.create(p); err != nil {
			t.Fatalf("the tenant's pod %s: %v", name, err)
		}
	}
	member("pair-0", "pair")
	member("pair-1", "pair")
	member("ghost-0", "ghost")

	nodes := map[string]bool{e.waitBound("pair-0", 60*time.Second): true, e.waitBound("pair-1", 60*time.Second): true}
	job := e.onlyJob("pair")
	show := scontrolJob(t, e.l, job.ID)
	if show["NumNodes"] != "2" || len(nodes) != 2 {
		t.Errorf("gang job %d: NumNodes=%s, pods on %v; want one job over 2 nodes", job.ID, show["NumNodes"], nodes)
	}
	if !strings.HasPrefix(show["UserId"], lab.TeamB+"(") || show["Account"] != lab.TeamB || show["QOS"] != lab.QOSNormal {
		t.Errorf("gang job %d: UserId=%s Account=%s QOS=%s; want team-b's user and account, QOS normal", job.ID, show["UserId"], show["Account"], show["QOS"])
	}

	msg := e.waitPendingWith("ghost-0", "PodGroup "+e.ns+"/ghost", 30*time.Second)
	if !strings.Contains(msg, "not found") {
		t.Errorf("the pod of a PodGroup that does not exist says: %s", msg)
	}
	if js := e.jobs("ghost"); len(js) != 0 {
		t.Errorf("pods of a PodGroup that does not exist got Slurm jobs %s", fmt.Sprint(jobIDs(js)))
	}
}
