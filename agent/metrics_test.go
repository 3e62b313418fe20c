package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkSeries is the exposition of onepool_agent_health_check_failed for
// node: every check, 1 for those failing.
func checkSeries(node string, failing ...string) string {
	out := "# HELP onepool_agent_health_check_failed 1 for each health check the node's GPUs fail now, 0 for each they pass, by check: nvml, count, xid, ecc, retired_pages, row_remap, temperature.\n" +
		"# TYPE onepool_agent_health_check_failed gauge\n"
	for _, c := range []string{"count", "ecc", "nvml", "retired_pages", "row_remap", "temperature", "xid"} {
		v := 0
		if slices.Contains(failing, c) {
			v = 1
		}
		out += fmt.Sprintf("onepool_agent_health_check_failed{check=%q,slurm_node=%q} %d\n", c, node, v)
	}
	return out
}

func TestHealthCollector(t *testing.T) {
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	checks := 0
	verdicts := []Verdict{
		{GPUs: 8},
		{GPUs: 7, Failures: []Failure{{Check: checkCount, Detail: "found 7 of 8"}, {Check: checkRetiredPages, Detail: "GPU 2"}, {Check: checkRetiredPages, Detail: "GPU 5"}}},
	}
	c := &HealthCollector{SlurmNode: "gpu-0", MinInterval: 30 * time.Second, Now: func() time.Time { return now },
		Check: func(context.Context) Verdict { checks++; return verdicts[min(checks, len(verdicts))-1] }}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	names := []string{"onepool_agent_gpus", "onepool_agent_gpus_healthy", "onepool_agent_health_check_failed"}

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP onepool_agent_gpus GPUs the node agent finds on its node (NVML's count at the last health check).
# TYPE onepool_agent_gpus gauge
onepool_agent_gpus{slurm_node="gpu-0"} 8
# HELP onepool_agent_gpus_healthy 1 when the node's GPUs pass every health check (the checks Slurm's HealthCheckProgram runs: NVML, count, XIDs, ECC, retired pages, row remapping, temperature), 0 when one fails.
# TYPE onepool_agent_gpus_healthy gauge
onepool_agent_gpus_healthy{slurm_node="gpu-0"} 1
`+checkSeries("gpu-0")), names...))
	_, err := reg.Gather()
	require.NoError(t, err)
	assert.Equal(t, 1, checks, "a scrape within MinInterval reuses the last verdict")

	now = now.Add(31 * time.Second)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP onepool_agent_gpus GPUs the node agent finds on its node (NVML's count at the last health check).
# TYPE onepool_agent_gpus gauge
onepool_agent_gpus{slurm_node="gpu-0"} 7
# HELP onepool_agent_gpus_healthy 1 when the node's GPUs pass every health check (the checks Slurm's HealthCheckProgram runs: NVML, count, XIDs, ECC, retired pages, row remapping, temperature), 0 when one fails.
# TYPE onepool_agent_gpus_healthy gauge
onepool_agent_gpus_healthy{slurm_node="gpu-0"} 0
`+checkSeries("gpu-0", "count", "retired_pages")), names...))
	assert.Equal(t, 2, checks)
}

// Against the inventory the lab's nodes use instead of NVML: a GPU with
// retired pages pending fails that check, the other passes.
func TestHealthCollectorOnTheInventory(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"nvidia0", "nvidia1"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, d), nil, 0o600))
	}
	inv := filepath.Join(dir, "gpus.json")
	require.NoError(t, os.WriteFile(inv, []byte(`{"gpus":[
{"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-a","minor":0,"memoryMiB":81559,"device":"`+dir+`/nvidia0"},
{"index":1,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-b","minor":1,"memoryMiB":81559,"device":"`+dir+`/nvidia1","retiredPagesPending":true}]}`), 0o600))
	c := NewHealthCollector("gpu-1", NewLibrary(inv), HealthConfig{ExpectedGPUs: 2, StateDir: t.TempDir()})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`# HELP onepool_agent_gpus GPUs the node agent finds on its node (NVML's count at the last health check).
# TYPE onepool_agent_gpus gauge
onepool_agent_gpus{slurm_node="gpu-1"} 2
`+checkSeries("gpu-1", "retired_pages")), "onepool_agent_gpus", "onepool_agent_health_check_failed"))
}
