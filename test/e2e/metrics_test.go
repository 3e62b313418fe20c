package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/onepool/onepool/internal/metricsdoc"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab"
	"github.com/onepool/onepool/test/lab/charts"
)

// scrape reads url's Prometheus text as the lab's scraper identity (the
// chart's metrics-reader role): each series line ("name{labels}", labels
// as the client library prints them, sorted) to its value.
func scrape(t *testing.T, l *lab.Lab, url string) (map[string]float64, error) {
	t.Helper()
	b, err := l.ScrapeMetrics(context.Background(), url)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// waitSeries waits until url serves series with value want.
func waitSeries(t *testing.T, l *lab.Lab, url, series string, want float64) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s = %v at %s", series, want, url), func() (bool, string) {
		m, err := scrape(t, l, url)
		if err != nil {
			return false, err.Error()
		}
		v, ok := m[series]
		return ok && v == want, fmt.Sprintf("%v (served: %v)", v, ok)
	})
}

var buildInfoLine = regexp.MustCompile(`^onepool_build_info\{component="([^"]+)",go_version="(go[^"]+)",revision="([^"]+)",version="([^"]+)"\}$`)

// buildOf is the revision Go stamped into a binary of the lab, as
// `go version -m` shows it (what the binary's build_info must say).
func buildOf(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	rev, modified := "unknown", false
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "build" {
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				rev = v
			case "vcs.modified":
				modified = v == "true"
			}
		}
	}
	if modified {
		rev += "-modified"
	}
	return rev
}

// Both components say which build they are, and the webhooks count their
// answers: a pod the GPU webhook refuses is one more "denied".
func TestMetricsOnTheLab(t *testing.T) {
	if lab.ChartMode() {
		t.Skip("the chart's components serve their metrics in their pods")
	}
	e := newGPUClaimsEnv(t)
	cm := e.l.ControllerManagerMetricsURL()
	sched := fmt.Sprintf("https://127.0.0.1:%d/metrics", lab.SchedulerPort)

	// The controller manager's /metrics is the chart's, and so is a node
	// agent's: HTTPS, to callers the API server authenticates and allows
	// to get /metrics.
	ctx := context.Background()
	// Any other identity, e.g. the scheduler's own ServiceAccount.
	other := tokenOf(t, e.l, lab.SchedulerSA)
	for _, u := range []string{cm, e.l.AgentMetricsURL(e.l.NodeNames()[0])} {
		if code, _, err := lab.GetMetrics(ctx, u, ""); err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s without a token: HTTP %d, %v; want 401", u, code, err)
		}
		if code, body, err := lab.GetMetrics(ctx, u, other); err != nil || code != http.StatusForbidden || strings.Contains(string(body), "onepool_") {
			t.Errorf("%s as %s (not a metrics reader): HTTP %d, %v; want 403 and no series", u, lab.SchedulerSA, code, err)
		}
		if _, err := e.l.ScrapeMetrics(ctx, u); err != nil {
			t.Errorf("as the chart's metrics reader: %v", err)
		}
	}
	for _, c := range []struct{ url, component, bin string }{
		{cm, "controller-manager", "onepool-controller-manager"},
		{sched, "scheduler", "onepool-scheduler"},
	} {
		m, err := scrape(t, e.l, c.url)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for s := range m {
			if strings.HasPrefix(s, "onepool_build_info{") {
				lines = append(lines, s)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%s: want one onepool_build_info series, got %q", c.url, lines)
		}
		f := buildInfoLine.FindStringSubmatch(lines[0])
		want := buildOf(t, filepath.Join(e.l.BinDir(), c.bin))
		if f == nil || f[1] != c.component || f[3] != want || m[lines[0]] != 1 {
			t.Errorf("%s: %s = %v; want component %q, revision %q (go version -m), value 1", c.url, lines[0], m[lines[0]], c.component, want)
		}
	}

	denied := `onepool_webhook_admissions_total{outcome="denied",webhook="gpu"}`
	m, err := scrape(t, e.l, cm)
	if err != nil {
		t.Fatal(err)
	}
	before, ok := m[denied]
	if !ok {
		t.Fatalf("%s not served at %s", denied, cm)
	}
	// Slurm allocates GPUs to a pod's containers only: an init container
	// that asks one is refused at admission.
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "init-gpu", Namespace: e.ns}, Spec: corev1.PodSpec{
		SchedulerName:  keys.SchedulerName,
		InitContainers: []corev1.Container{{Name: "warm", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: gpu}}},
		Containers:     []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: gpu}}},
	}}
	_, err = e.kc.CoreV1().Pods(e.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "init container") {
		t.Fatalf("a pod whose init container asks a GPU: %v; want refused by the GPU webhook", err)
	}
	waitSeries(t, e.l, cm, denied, before+1)

	// A pod placed through Slurm: the scheduler says which GPUs its job
	// holds, index by index, as a pod's.
	p := newSchedEnv(t)
	p.create(p.pod("held", 2, nil))
	p.waitBound("held", 90*time.Second)
	p.withJobID("held")
	job := p.onlyJob("held")
	eventually(t, 30*time.Second, "the scheduler counts the placed pod", func() (bool, string) {
		m, err := scrape(t, e.l, sched)
		if err != nil {
			return false, err.Error()
		}
		placed, ok := m[`onepool_scheduler_placements{state="placed"}`]
		_, oldest := m["onepool_scheduler_oldest_pending_seconds"]
		return ok && placed >= 1 && oldest, fmt.Sprintf("placed=%v (served %v), oldest_pending served %v", placed, ok, oldest)
	})
	for node := range job.GresDetail {
		idx, err := job.GPUIndexes(node)
		if err != nil || len(idx) != 2 {
			t.Fatalf("job %d on %s: GPU indexes %v, %v", job.ID, node, idx, err)
		}
		for _, i := range idx {
			waitSeries(t, e.l, sched, fmt.Sprintf(`onepool_gpu_held{gres_index="%d",holder="pod",slurm_node="%s"}`, i, node), 1)
		}
	}

	// Every series an alert or a dashboard panel of the chart reads is
	// served by the lab's components now: an alert on a series nobody
	// serves never fires, a panel on one stays empty. The NodeSet series
	// are per NodeSet: one that selects no node yet.
	newNodeSetEnv(t, "metrics").start(nil, 1)
	urls := []string{cm, sched}
	for _, n := range e.l.NodeNames() {
		urls = append(urls, e.l.AgentMetricsURL(n))
	}
	chartQueriesServed(t, e.l, urls)
}

// chartQueriesServed checks that every onepool_* series the chart's alerts
// and dashboard read is served at one of urls.
func chartQueriesServed(t *testing.T, l *lab.Lab, urls []string) {
	t.Helper()
	served := map[string]string{}
	for _, u := range urls {
		m, err := scrape(t, l, u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		for s := range m {
			name, _, _ := strings.Cut(s, "{")
			served[name] = u
		}
	}
	queries, err := metricsdoc.ChartQueries("../..")
	if err != nil {
		t.Fatal(err)
	}
	asWritten := func(string) bool { return false } // a histogram's _bucket is a series of its own here
	checked, missing := map[string]bool{}, 0
	for _, q := range queries {
		for _, n := range q.Names(asWritten) {
			checked[n] = true
			if _, ok := served[n]; !ok {
				missing++
				t.Errorf("%s reads %s, which none of %v serves", q.Where, n, urls)
			}
		}
	}
	t.Logf("the chart's %d alert and panel queries read %d series; %d reads of a series nobody serves", len(queries), len(checked), missing)
}

// tokenOf is the token in the lab's kubeconfig of one of the chart's
// ServiceAccounts.
func tokenOf(t *testing.T, l *lab.Lab, sa string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(l.SAKubeconfig(sa))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token
		}
	}
	t.Fatalf("no token in %s", l.SAKubeconfig(sa))
	return ""
}

// The chart's components serve /metrics as its ServiceMonitors scrape
// them: through each metrics Service, over TLS verified with the CA in
// the webhook certificate Secret for the Service's name (the scheduler's
// pair too is signed by that CA), to the chart's metrics-reader identity.
func TestMetricsOnTheChartVerifiedWithItsCA(t *testing.T) {
	if !lab.ChartMode() {
		t.Skip("the lab runs its components as processes (ONEPOOL_LAB_COMPONENTS=chart runs the chart's pods)")
	}
	l := lab.Shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sec, err := kc.CoreV1().Secrets(lab.SystemNamespace).Get(ctx, charts.Release+"-gpu-webhook-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		t.Fatalf("secret %s has no ca.crt", sec.Name)
	}
	token, err := l.MetricsToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ service, component string }{
		{charts.Release + "-controller-manager-metrics", "controller-manager"},
		{charts.Release + "-scheduler-metrics", "scheduler"},
	} {
		svc, err := kc.CoreV1().Services(lab.SystemNamespace).Get(ctx, c.service, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("https://%s:%d/metrics", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
		name := c.service + "." + lab.SystemNamespace + ".svc"
		var body []byte
		eventually(t, time.Minute, c.service+" answers over TLS verified for "+name, func() (bool, string) {
			code, b, err := lab.GetMetricsTLS(ctx, url, token, &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})
			body = b
			return err == nil && code == http.StatusOK, fmt.Sprintf("HTTP %d, %v", code, err)
		})
		if want := `onepool_build_info{component="` + c.component + `"`; !strings.Contains(string(body), want) {
			t.Errorf("%s: no %s... series", url, want)
		}
		// Another name than the Service's is refused: the certificate
		// names that Service, not anything the CA signed.
		_, _, err = lab.GetMetricsTLS(ctx, url, token, &tls.Config{RootCAs: pool, ServerName: "kubernetes.default.svc", MinVersion: tls.VersionTLS12})
		var host x509.HostnameError
		if !errors.As(err, &host) {
			t.Errorf("%s verified as kubernetes.default.svc: %v; want a certificate for %s only", url, err, name)
		}
	}
}
