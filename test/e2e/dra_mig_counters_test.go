package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/onepool/onepool/keys"
)

// servesPartitionable says whether the lab's API server serves partitionable
// devices: DRAPartitionableDevices is beta, on by default, from Kubernetes
// 1.36 (the lab passes no feature gates).
func servesPartitionable(t *testing.T, kc kubernetes.Interface) (bool, string) {
	t.Helper()
	v, err := kc.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil || v.Major != "1" {
		t.Fatalf("server version %s.%s: %v", v.Major, v.Minor, err)
	}
	return minor >= 36, v.GitVersion
}

// checkMIGSliceForm checks the form of the fake MIG node's ResourceSlices
// (GPU 0 partitioned in the inventory in hostDir, the fake node's directory
// on the host; GPU 1 whole): where the API server serves partitionable
// devices, GPU 0 is a counter set gpu-0 (in a slice of
// counters only) holding the GPU's memory as the inventory gives it, each
// MIG device consumes its own memory from it and the whole GPU nothing;
// elsewhere one slice of plain devices, no counters anywhere.
func checkMIGSliceForm(t *testing.T, c client.Client, kc kubernetes.Interface, node, hostDir string) {
	t.Helper()
	var inv struct {
		GPUs []struct {
			MemoryMiB int64 `json:"memoryMiB"`
		} `json:"gpus"`
	}
	b, err := os.ReadFile(filepath.Join(hostDir, "inv.json"))
	if err != nil || json.Unmarshal(b, &inv) != nil || len(inv.GPUs) != 2 {
		t.Fatalf("the fake MIG inventory: %v %s", err, b)
	}
	partitionable, version := servesPartitionable(t, kc)
	eventually(t, 30*time.Second, "the ResourceSlices' form on "+version, func() (bool, string) {
		var list resourceapi.ResourceSliceList
		if err := c.List(context.Background(), &list); err != nil {
			return false, err.Error()
		}
		var slices, counterSlices int
		sets := map[string]int64{}
		uses := map[string]string{}
		for _, s := range list.Items {
			if s.Spec.Driver != keys.GPUDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
				continue
			}
			slices++
			if len(s.Spec.SharedCounters) > 0 {
				counterSlices++
			}
			for _, cs := range s.Spec.SharedCounters {
				v := cs.Counters[keys.GPUCounterMemory].Value
				sets[cs.Name] = v.Value() >> 20
			}
			for _, d := range s.Spec.Devices {
				mem := d.Capacity[keys.GPUCapacityMemory].Value
				for _, cc := range d.ConsumesCounters {
					v := cc.Counters[keys.GPUCounterMemory].Value
					if v.Cmp(mem) != 0 {
						return false, fmt.Sprintf("%s consumes %s of %s, has %s", d.Name, v.String(), cc.CounterSet, mem.String())
					}
					uses[d.Name] = cc.CounterSet
				}
				if _, mig := d.Attributes[keys.GPUAttrParentUUID]; partitionable && mig && uses[d.Name] != "gpu-0" {
					return false, d.Name + " consumes no counter of gpu-0"
				}
			}
		}
		state := fmt.Sprintf("%d slices (%d of counters), counter sets %v, consumers %v", slices, counterSlices, sets, uses)
		if !partitionable {
			return slices == 1 && len(sets) == 0 && len(uses) == 0, state
		}
		return slices == 2 && counterSlices == 1 && len(sets) == 1 && sets["gpu-0"] == inv.GPUs[0].MemoryMiB && len(uses) == 4 && uses["gpu-1"] == "", state
	})
	t.Logf("%s: partitionable devices served: %v", version, partitionable)
}
