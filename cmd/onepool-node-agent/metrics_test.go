package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/agent"
	"github.com/onepool/onepool/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// inventoryOfTwo is the inventory the lab uses instead of NVML: two GPUs,
// the first too hot.
func inventoryOfTwo(t *testing.T) agent.Library {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"nvidia0", "nvidia1"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, d), nil, 0o600))
	}
	inv := filepath.Join(dir, "gpus.json")
	require.NoError(t, os.WriteFile(inv, []byte(`{"gpus":[
{"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-a","minor":0,"memoryMiB":81559,"device":"`+dir+`/nvidia0","temperatureC":95,"slowdownTemperatureC":90},
{"index":1,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-b","minor":1,"memoryMiB":81559,"device":"`+dir+`/nvidia1"}]}`), 0o600))
	return agent.NewLibrary(inv)
}

func agentHealth(t *testing.T) agent.HealthConfig {
	return agent.HealthConfig{ExpectedGPUs: 2, StateDir: t.TempDir()}
}

// The dra command's /metrics with --metrics-secure=false (plain HTTP), on
// a node of two GPUs, one failing a health check: the build, the GPUs,
// the check.
func TestMetricsServed(t *testing.T) {
	h, err := metricsHandler("gpu-3", inventoryOfTwo(t), agentHealth(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	logger := log.New(io.Discard, "", 0)
	plain := metricsServing{addr: addr}
	require.NoError(t, plain.serve(ctx, h, logger))

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	assert.Contains(t, text, `onepool_build_info{component="node-agent"`)
	assert.Contains(t, text, `onepool_agent_gpus{slurm_node="gpu-3"} 2`)
	assert.Contains(t, text, `onepool_agent_gpus_healthy{slurm_node="gpu-3"} 0`)
	assert.Contains(t, text, `onepool_agent_health_check_failed{check="temperature",slurm_node="gpu-3"} 1`)

	assert.Error(t, plain.serve(ctx, h, logger), "the port is taken: an error at start")
	assert.NoError(t, metricsServing{}.serve(ctx, h, logger), "off")
	cancel()
	assert.Eventually(t, func() bool {
		_, err := http.Get("http://" + addr + "/metrics")
		return err != nil && strings.Contains(err.Error(), "refused")
	}, 5e9, 1e8, "the server stops with the command")
}
