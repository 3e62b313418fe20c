// Package charts_test checks onepool's two Helm charts, charts/onepool and
// charts/slurm, with helm alone (no cluster): `helm lint --strict` with
// every values file under charts/<chart>/ci/, and golden renders: `helm
// template` of each case in goldenCases must equal
// testdata/golden/<chart>-<case>.yaml. After a deliberate change to a
// chart, `go test ./charts -update` writes the renders there; the diff of
// the golden files is then what the change does to what users install.
//
// helm is the lab's (`make unit` builds it into .lab/bin and sets
// KUBEBUILDER_ASSETS to that directory, as for envtest); without
// KUBEBUILDER_ASSETS the tests skip.
package charts_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	labcharts "github.com/onepool/onepool/test/lab/charts"
)

var update = flag.Bool("update", false, "write testdata/golden/ from the charts' renders")

const goldenDir = "testdata/golden"

// helm runs the lab's helm binary with its own empty cache, config and
// data directories (a user's repositories and plugins change nothing).
type helm struct{ bin, home string }

func newHelm(t *testing.T) helm {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS unset: run `make unit` (it builds kube-apiserver, etcd and helm into .lab/bin)")
	}
	bin := filepath.Join(assets, "helm")
	require.FileExists(t, bin, "KUBEBUILDER_ASSETS has no helm: run `make unit` (it builds helm into .lab/bin)")
	return helm{bin: bin, home: t.TempDir()}
}

// run is helm's stdout and stderr apart, and its error.
func (h helm) run(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"), "HELM_DATA_HOME="+filepath.Join(h.home, "data"),
		// No cluster is asked anything (template and lint do not need one).
		"KUBECONFIG="+filepath.Join(h.home, "no-kubeconfig"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// chartDir is charts/<name>.
func chartDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := labcharts.Dir(name)
	require.NoError(t, err)
	return dir
}

// ciLayers: a ci values file that is not whole on its own, and the ones
// it is layered on, in order (as test/lab/charts.Values installs them).
var ciLayers = map[string][]string{
	"onepool/lab-node-values.yaml": {"lab-values.yaml"},
}

// ciValues are the values files under charts/<chart>/ci/, by base name.
func ciValues(t *testing.T, chart string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t, chart), "ci", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "charts/%s/ci has no values file", chart)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	return names
}

// Every values file under charts/<chart>/ci/ lints clean with --strict
// (a warning fails it): the schema, the templates, the rendered YAML.
func TestChartsLintStrictWithEachCIValuesFile(t *testing.T) {
	h := newHelm(t)
	for _, chart := range []string{"onepool", "slurm"} {
		dir := chartDir(t, chart)
		for _, file := range ciValues(t, chart) {
			t.Run(chart+"/"+file, func(t *testing.T) {
				t.Parallel()
				args := []string{"lint", "--strict", dir, "--kube-version", labcharts.KubeVersion}
				for _, base := range append(slices.Clone(ciLayers[chart+"/"+file]), file) {
					args = append(args, "-f", filepath.Join(dir, "ci", base))
				}
				out, stderr, err := h.run(args...)
				require.NoError(t, err, "helm %v:\n%s%s", args, out, stderr)
				assert.NotContains(t, out, "[WARNING]")
				assert.NotContains(t, out, "[ERROR]")
				assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
			})
		}
	}
}

// upgradeToTemplate is the `helm template` of a `helm upgrade --install`
// the lab runs (test/lab/charts): what it would install.
func upgradeToTemplate(t *testing.T, args []string) []string {
	t.Helper()
	require.Equal(t, []string{"upgrade", "--install"}, args[:2], "test/lab/charts' install arguments changed shape")
	out := []string{"template"}
	for _, a := range args[2:] {
		if a != "--create-namespace" {
			out = append(out, a)
		}
	}
	return append(out, "--kube-version", labcharts.KubeVersion)
}

// goldenCase is one `helm template` of a chart, kept in
// testdata/golden/<chart>-<name>.yaml.
type goldenCase struct {
	chart, name string
	// args are helm's, from "template" on.
	args func(t *testing.T, dir string) []string
}

// template is `helm template <release> <dir> -n <namespace> -f ci/<file>...`
// at the lab's Kubernetes version.
func template(release, namespace string, files ...string) func(*testing.T, string) []string {
	return func(_ *testing.T, dir string) []string {
		args := []string{"template", release, dir, "--namespace", namespace, "--kube-version", labcharts.KubeVersion}
		for _, f := range files {
			args = append(args, "-f", filepath.Join(dir, "ci", f))
		}
		return args
	}
}

// goldenCases: each ci values file, rendered the way the lab renders and
// installs the charts (release names and namespaces of test/lab/charts:
// the e2e suites check the names these give), and the overrides.
var goldenCases = []goldenCase{
	// What the lab renders (its RBAC, the e2e dry runs) and lints.
	{"onepool", "lab", func(_ *testing.T, dir string) []string {
		return labcharts.TemplateArgs(dir)
	}},
	// What `helm install` puts on the lab's real node (chart mode).
	{"onepool", "lab-node", func(t *testing.T, dir string) []string {
		return upgradeToTemplate(t, labcharts.UpgradeArgs(dir))
	}},
	{"onepool", "overrides", template("prod", "onepool-system", "overrides-values.yaml")},
	{"slurm", "lab", template(labcharts.SlurmRelease, labcharts.SlurmNamespace, "lab-values.yaml")},
	// What the lab installs: the jail on, its kubelet's directories.
	{"slurm", "lab-install", func(t *testing.T, dir string) []string {
		return upgradeToTemplate(t, labcharts.SlurmUpgradeArgs(dir,
			labcharts.SlurmNode{JailHostPath: "/lab/jail", KubeletDir: "/lab/kubelet", CDIDir: "/lab/cdi"}))
	}},
	{"slurm", "overrides", template("prod", "hpc", "overrides-values.yaml")},
}

func (c goldenCase) file() string { return filepath.Join(goldenDir, c.chart+"-"+c.name+".yaml") }

// Each case renders as its golden file says, and the same twice (GitOps
// tools render at every sync: a key or certificate made at render time,
// or a map's order, would show here).
func TestChartsRenderAsTheGoldenFiles(t *testing.T) {
	h := newHelm(t)
	if *update {
		require.NoError(t, os.MkdirAll(goldenDir, 0o755))
	}
	want := map[string]bool{}
	for _, c := range goldenCases {
		want[filepath.Base(c.file())] = true
		t.Run(c.chart+"-"+c.name, func(t *testing.T) {
			t.Parallel()
			args := c.args(t, chartDir(t, c.chart))
			out, stderr, err := h.run(args...)
			require.NoError(t, err, "helm %v: %s", args, stderr)
			assert.Empty(t, stderr, "helm %v warned", args)
			again, _, err := h.run(args...)
			require.NoError(t, err)
			require.Equal(t, out, again, "two renders of helm %v differ", args)
			if *update {
				require.NoError(t, os.WriteFile(c.file(), []byte(out), 0o644))
				return
			}
			golden, err := os.ReadFile(c.file())
			require.NoError(t, err, "no golden file: run go test ./charts -update")
			if d := firstDifference(string(golden), out); d != "" {
				t.Errorf("helm %v differs from %s (if the change is meant, run go test ./charts -update and review the golden diff):\n%s", args, c.file(), d)
			}
		})
	}
	// No golden file outlives its case.
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if want[filepath.Base(f)] {
			continue
		}
		if *update {
			require.NoError(t, os.Remove(f))
			continue
		}
		t.Errorf("%s is no case's golden file: run go test ./charts -update", f)
	}
}

// firstDifference shows where got first differs from want, with a few
// lines around ("" when they are equal): the whole render would bury it.
func firstDifference(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at line %d (golden %d lines, render %d):\n", i+1, len(w), len(g))
	show := func(prefix string, lines []string) {
		for j := max(0, i-3); j < min(len(lines), i+4); j++ {
			mark := " "
			if j >= i {
				mark = prefix
			}
			fmt.Fprintf(&b, "%s%5d %s\n", mark, j+1, lines[j])
		}
	}
	show("-", w)
	b.WriteString("---\n")
	show("+", g)
	return b.String()
}

// object is what the name tests read of a rendered object.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// objects are the documents of a render.
func objects(t *testing.T, rendered string) []object {
	t.Helper()
	var out []object
	for _, doc := range strings.Split(rendered, "\n---") {
		var o object
		require.NoError(t, yaml.Unmarshal([]byte(doc), &o), "%s", doc)
		if o.Kind != "" {
			out = append(out, o)
		}
	}
	return out
}

// Names follow Helm's convention: fullnameOverride; else <release>-<name>,
// or the release's name when it holds <name>; <name> is nameOverride or
// the chart's, and the app.kubernetes.io/name label.
func TestChartsNameObjectsAsHelmDoes(t *testing.T) {
	h := newHelm(t)
	const long = "a-release-name-well-over-forty-characters-long"
	for _, tc := range []struct {
		chart, release string
		set            []string
		// want: the first object's name and its app.kubernetes.io/name.
		want, label string
	}{
		{"onepool", "onepool", nil, "onepool-controller-manager", "onepool"},
		{"onepool", "my-onepool", nil, "my-onepool-controller-manager", "onepool"},
		{"onepool", "prod", nil, "prod-onepool-controller-manager", "onepool"},
		{"onepool", "prod", []string{"nameOverride=gpupool"}, "prod-gpupool-controller-manager", "gpupool"},
		{"onepool", "gpupool", []string{"nameOverride=gpupool"}, "gpupool-controller-manager", "gpupool"},
		{"onepool", "prod", []string{"fullnameOverride=gpus", "nameOverride=gpupool"}, "gpus-controller-manager", "gpupool"},
		{"onepool", long, nil, long[:40] + "-controller-manager", "onepool"},
		{"slurm", "slurm", nil, "slurm-restapi", "slurm"},
		{"slurm", "prod", nil, "prod-slurm-restapi", "slurm"},
		{"slurm", "prod", []string{"fullnameOverride=hpc"}, "hpc-restapi", "slurm"},
		{"slurm", "prod", []string{"nameOverride=hpc"}, "prod-hpc-restapi", "hpc"},
	} {
		t.Run(tc.chart+"/"+tc.release+"/"+strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			dir := chartDir(t, tc.chart)
			show := map[string]string{"onepool": "templates/controller-manager.yaml", "slurm": "templates/slurmrestd.yaml"}[tc.chart]
			args := []string{"template", tc.release, dir, "--namespace", "ns", "--kube-version", labcharts.KubeVersion,
				"-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--show-only", show}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, stderr, err := h.run(args...)
			require.NoError(t, err, "helm %v: %s", args, stderr)
			objs := objects(t, out)
			require.NotEmpty(t, objs)
			assert.Equal(t, tc.want, objs[0].Metadata.Name)
			for _, o := range objs {
				assert.Equal(t, tc.label, o.Metadata.Labels["app.kubernetes.io/name"], "%s %s", o.Kind, o.Metadata.Name)
			}
		})
	}
}

// Values the charts cannot use fail the render with a message that names
// the value.
func TestChartsRefuseBadConventionValues(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		chart string
		set   []string
		want  string
	}{
		{"onepool", []string{"controllerManager.serviceAccount.create=false"},
			"controllerManager.serviceAccount.name is required when controllerManager.serviceAccount.create is false"},
		{"onepool", []string{"scheduler.serviceAccount.create=false"},
			"scheduler.serviceAccount.name is required when scheduler.serviceAccount.create is false"},
		{"onepool", []string{"scheduler.image.tags=1.0"}, "additional properties 'tags' not allowed"},
		{"onepool", []string{"controllerManager.image.pullPolicy=Sometimes"}, "/controllerManager/image/pullPolicy"},
		{"onepool", []string{"scheduler.serviceAccount.name=Bad_Name"}, "/scheduler/serviceAccount/name"},
		{"onepool", []string{"fullnameOverride=Bad_Name"}, "/fullnameOverride"},
		{"onepool", []string{"fullnameOverride=a-fullname-of-thirty-seven-characters"}, "/fullnameOverride"},
		{"slurm", []string{"keys.serviceAccount.create=false"},
			"keys.serviceAccount.name is required when keys.serviceAccount.create is false"},
		{"slurm", []string{"dra.serviceAccount.create=false"},
			"dra.serviceAccount.name is required when dra.serviceAccount.create is false"},
		{"slurm", []string{"login.image.repo=x"}, "additional properties 'repo' not allowed"},
		{"slurm", []string{"accounting.mariadb.image.pullPolicy=Sometimes"}, "/accounting/mariadb/image/pullPolicy"},
		{"slurm", []string{"nameOverride=Slurm"}, "/nameOverride"},
	} {
		t.Run(tc.chart+"/"+strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			args := labTemplateArgs(chartDir(t, tc.chart), tc.set)
			_, stderr, err := h.run(args...)
			require.Error(t, err, "helm %v rendered", args)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// labTemplateArgs renders chart dir with the lab's values and --set each of set.
func labTemplateArgs(dir string, set []string) []string {
	args := []string{"template", "r", dir, "--namespace", "ns", "--kube-version", labcharts.KubeVersion,
		"-f", filepath.Join(dir, "ci", "lab-values.yaml")}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// A component that is off, or has nothing to do, needs no ServiceAccount
// name even with serviceAccount.create false.
func TestChartsNeedNoServiceAccountForWhatIsOff(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		chart string
		set   []string
	}{
		{"onepool", []string{"scheduler.enabled=false", "scheduler.serviceAccount.create=false"}},
		{"onepool", []string{"controllerManager.enabled=false", "controllerManager.serviceAccount.create=false"}},
		{"slurm", []string{"dra.enabled=false", "dra.serviceAccount.create=false"}},
		// Every key named: the keys Job has nothing to make.
		{"slurm", []string{"secrets.mungeKey=munge", "secrets.jwtKey=jwt", "accounting.mariadb.existingSecret=db",
			"keys.serviceAccount.create=false"}},
	} {
		t.Run(tc.chart+"/"+strings.Join(tc.set, ","), func(t *testing.T) {
			t.Parallel()
			args := labTemplateArgs(chartDir(t, tc.chart), tc.set)
			_, stderr, err := h.run(args...)
			require.NoError(t, err, "helm %v: %s", args, stderr)
		})
	}
}

// Both charts say which Kubernetes they need and mean it: onepool's
// scheduler embeds kube-scheduler 1.35, which the version skew policy does
// not let run against an older API server, and the lab proves 1.35. Helm
// refuses an older cluster at once, with the reason.
func TestChartsKubeVersions(t *testing.T) {
	h := newHelm(t)
	for _, chart := range []string{"onepool", "slurm"} {
		for _, tc := range []struct {
			version string
			ok      bool
		}{{"1.34.3", false}, {"1.35.0", true}, {labcharts.KubeVersion, true}, {"1.36.1", true}} {
			t.Run(chart+"/"+tc.version, func(t *testing.T) {
				dir := chartDir(t, chart)
				out, stderr, err := h.run("template", "r", dir, "--namespace", "ns", "-f", filepath.Join(dir, "ci", "lab-values.yaml"), "--kube-version", tc.version)
				if tc.ok {
					require.NoError(t, err, "%s%s", out, stderr)
					return
				}
				require.Error(t, err)
				assert.Contains(t, stderr, "is incompatible with Kubernetes v"+tc.version)
			})
		}
	}
}
