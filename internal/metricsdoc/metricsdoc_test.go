package metricsdoc

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const root = "../.."

// skipDirs hold no onepool component: the lab's tools, generated clients,
// the lab's own state.
var skipDirs = map[string]bool{".git": true, ".lab": true, ".lab-26.05": true, "tools": true, "gen": true, "testdata": true}

// definedMetrics are the onepool_* names the code gives Prometheus: the
// Name of a prometheus.*Opts literal (a string or a package constant) or
// the name of a prometheus.NewDesc. Test files are left out.
func definedMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	byDir := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], f)
		return nil
	})
	require.NoError(t, err)
	for dir, files := range byDir {
		consts := map[string]string{}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				if vs, ok := n.(*ast.ValueSpec); ok {
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if s, ok := stringLit(vs.Values[i]); ok {
								consts[name.Name] = s
							}
						}
					}
				}
				return true
			})
		}
		value := func(e ast.Expr) string {
			if s, ok := stringLit(e); ok {
				return s
			}
			if id, ok := e.(*ast.Ident); ok {
				return consts[id.Name]
			}
			return ""
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
								if v := value(kv.Value); strings.HasPrefix(v, "onepool_") {
									out[v] = dir
								}
							}
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
						if v := value(n.Args[0]); strings.HasPrefix(v, "onepool_") {
							out[v] = dir
						}
					}
				}
				return true
			})
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

var rowMetric = regexp.MustCompile("^\\| `([a-z_]+)`")

// documentedMetrics are the first cells of README's metrics table.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Metrics"
		case in:
			if m := rowMetric.FindStringSubmatch(line); m != nil {
				out[m[1]] = true
			}
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestEveryMetricIsDocumented(t *testing.T) {
	defined := definedMetrics(t)
	documented := documentedMetrics(t)
	require.NotEmpty(t, documented, "README.md has no \"## Metrics\" table")
	// The scan itself: series every component is known to have.
	for _, m := range []string{"onepool_build_info", "onepool_slurmrest_requests_total", "onepool_syncer_actions_total",
		"onepool_scheduler_submissions_total", "onepool_nodeset_members", "onepool_webhook_admissions_total"} {
		require.Contains(t, defined, m, "the source scan missed a metric")
	}
	var undocumented, gone []string
	for m, dir := range defined {
		if !documented[m] {
			undocumented = append(undocumented, m+" ("+dir+")")
		}
	}
	for m := range documented {
		if _, ok := defined[m]; !ok && strings.HasPrefix(m, "onepool_") {
			gone = append(gone, m)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(gone)
	assert.Empty(t, undocumented, "metrics with no row in README.md's \"## Metrics\" table")
	assert.Empty(t, gone, "README.md's metrics table names series the code no longer defines")
}

// The chart's alerts and dashboard read only series the code defines: a
// renamed metric cannot leave an alert that never fires or an empty panel.
func TestAlertsAndDashboardReadDefinedMetrics(t *testing.T) {
	defined := definedMetrics(t)
	queries, err := ChartQueries(root)
	require.NoError(t, err)
	isMetric := func(n string) bool { _, ok := defined[n]; return ok }
	used := map[string]bool{}
	alerts := 0
	for _, q := range queries {
		if strings.HasPrefix(q.Where, "alert ") {
			alerts++
		}
		for _, n := range q.Names(isMetric) {
			used[n] = true
			assert.Contains(t, defined, n, "%s reads %s, which no component defines", q.Where, n)
		}
	}
	require.NotZero(t, alerts, "no alert read")
	require.Contains(t, used, "onepool_gpu_held")
	require.Contains(t, used, "onepool_scheduler_submit_to_bound_seconds", "a histogram's _bucket series is read under its name")
}
