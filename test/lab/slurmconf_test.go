package lab

import (
	"strings"
	"testing"
)

func TestFakeGPUInventory(t *testing.T) {
	inv := fakeGPUInventory()
	for _, want := range []string{`"name": "NVIDIA H100 80GB HBM3"`, `"uuid": "GPU-lab-7"`, `"minor": 7`,
		`"memoryMiB": 81559`, `"device": "/var/lib/fakegpu/nvidia7"`, `"index": 0`} {
		if !strings.Contains(inv, want) {
			t.Errorf("inventory lacks %s:\n%s", want, inv)
		}
	}
	if strings.Contains(inv, "nvidia8") {
		t.Errorf("inventory has more than 8 GPUs:\n%s", inv)
	}
}

func TestConfigFromEnvDynNodes(t *testing.T) {
	t.Setenv("ONEPOOL_LAB_DIR", "/x")
	for _, tc := range []struct {
		nodes, dyn string
		want       int
		ok         bool
	}{{"4", "", 5, true}, {"4", "0", 0, true}, {"4", "32", 32, true}, {"4", "33", 0, false}, {"51", "1", 0, false}, {"51", "0", 0, true}} {
		t.Setenv("ONEPOOL_LAB_NODES", tc.nodes)
		t.Setenv("ONEPOOL_LAB_DYN_NODES", tc.dyn)
		c, err := ConfigFromEnv()
		if (err == nil) != tc.ok || (tc.ok && c.DynNodes != tc.want) {
			t.Errorf("nodes %s dyn %q: DynNodes %d, err %v; want %d, ok %v", tc.nodes, tc.dyn, c.DynNodes, err, tc.want, tc.ok)
		}
	}
}

func TestDynSlurmdPort(t *testing.T) {
	for name, want := range map[string]int{"dyn-0": 26950, "dyn-31": 26981, "dyn-32": 0, "dyn-01": 0, "gpu-0": 0, "dyn-": 0} {
		if got, ok := DynSlurmdPort(name); got != want || ok != (want != 0) {
			t.Errorf("DynSlurmdPort(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}
