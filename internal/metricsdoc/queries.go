package metricsdoc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Chart files that read metrics, relative to the repository's root.
const (
	RulesFile     = "charts/onepool/files/onepool-rules.yaml"
	DashboardFile = "charts/onepool/files/onepool-dashboard.json"
)

// Query is one PromQL expression the chart ships: an alert's or a
// dashboard panel's.
type Query struct {
	Where string // "alert X" or "panel Y"
	Expr  string
}

// ChartQueries reads every alert's and every dashboard panel's expression
// from the chart under root; a panel without a query is an error.
func ChartQueries(root string) ([]Query, error) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		return nil, fmt.Errorf("%s: %w", RulesFile, err)
	}
	var out []Query
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, Query{Where: "alert " + r.Alert, Expr: r.Expr})
		}
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if b, err = os.ReadFile(filepath.Join(root, DashboardFile)); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			return nil, fmt.Errorf("%s: panel %q has no query", DashboardFile, p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" {
				return nil, fmt.Errorf("%s: panel %q has an empty query", DashboardFile, p.Title)
			}
			out = append(out, Query{Where: "panel " + p.Title, Expr: q.Expr})
		}
	}
	return out, nil
}

var seriesName = regexp.MustCompile(`\bonepool_[a-z_]+\b`)

// Names are the onepool_* metric names expr reads, a histogram's _bucket,
// _count and _sum series under the histogram's name (when isMetric says
// that name is a metric).
func (q Query) Names(isMetric func(string) bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range seriesName.FindAllString(q.Expr, -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && isMetric(base) {
				n = base
			}
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
