package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/onepool/onepool/test/lab"
)

// benchScaleSyncer times both directions of the syncer at the lab's
// scale: slurmd pods on 2×syncerSamples of the CLOUD nodes (the rest of
// the 10,000 have none, as a site's nodes outside onepool), cordon →
// Slurm drain on the first half, scontrol drain → pod annotation on the
// second.
func benchScaleSyncer(t *testing.T, l *lab.Lab, rep func(string, float64, string)) {
	sim := l.ExtraNodeNames()
	if len(sim) < 2*syncerSamples {
		t.Fatalf("the syncer figures need ONEPOOL_LAB_EXTRA_NODES>=%d (have %d)", 2*syncerSamples, len(sim))
	}
	sim = sim[:2*syncerSamples]
	kc, sc := withSlurmdPods(t, l, sim)
	c2d := timeCordonToDrain(t, kc, sc, sim[:syncerSamples])
	rep("scale_cordon_to_drain_p50_ms", percentileMS(c2d, 0.50), "ms")
	rep("scale_cordon_to_drain_p99_ms", percentileMS(c2d, 0.99), "ms")
	d2a := timeDrainToAnnotation(t, l, kc, sim[syncerSamples:])
	rep("scale_drain_to_annotation_p50_ms", percentileMS(d2a, 0.50), "ms")
	rep("scale_drain_to_annotation_p99_ms", percentileMS(d2a, 0.99), "ms")
}

// heapProfile saves a component's Go heap profile (after a GC) under the
// lab's directory, for `go tool pprof`, and returns its in-use heap bytes
// (runtime.MemStats.HeapInuse, from the profile's text form).
func heapProfile(t *testing.T, l *lab.Lab, base, component string) (float64, error) {
	t.Helper()
	ctx := context.Background()
	token, err := l.MetricsToken(ctx)
	if err != nil {
		return 0, err
	}
	get := func(query string) ([]byte, error) {
		code, b, err := lab.GetMetrics(ctx, base+"/debug/pprof/heap?"+query, token)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s heap profile: HTTP %d: %.200s", component, code, b)
		}
		return b, err
	}
	b, err := get("gc=1")
	if err != nil {
		return 0, err
	}
	file := filepath.Join(l.LogDir(), "..", "bench-scale-"+component+".heap.pb.gz")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return 0, err
	}
	t.Logf("%s heap profile: %s (go tool pprof -top -sample_index=inuse_space %s)", component, file, file)
	text, err := get("debug=1")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s heap profile: no HeapInuse line", component)
}
