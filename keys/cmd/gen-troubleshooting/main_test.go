package main

import (
	"bytes"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onepool/onepool/keys"
)

// root is the repository root, from this package's directory.
const root = "../../.."

// module is the import path of the repository root.
const module = "github.com/onepool/onepool"

// sourceImporter type-checks this module's packages from their source
// (the gc importer finds only the standard library's) and the rest with
// the gc importer.
type sourceImporter struct {
	fset *token.FileSet
	std  types.Importer
	done map[string]*types.Package
}

func (im *sourceImporter) Import(path string) (*types.Package, error) {
	if p, ok := im.done[path]; ok {
		return p, nil
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return im.std.Import(path)
	}
	p, err := im.check(filepath.Join(root, filepath.FromSlash(rel)), path)
	if err != nil {
		return nil, err
	}
	im.done[path] = p
	return p, nil
}

// check type-checks the package in dir (its non-test files).
func (im *sourceImporter) check(dir, path string) (*types.Package, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(im.fset, p, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: im}
	return conf.Check(path, im.fset, files, nil)
}

// stringConsts are the exported string constants of the package in dir
// (its non-test files), by name: type-checked, so a constant built from
// others (drain.ReasonCordoned = Prefix + "node cordoned") has its value.
func stringConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	im := &sourceImporter{fset: fset, std: importer.ForCompiler(fset, "gc", nil), done: map[string]*types.Package{}}
	pkg, err := im.check(dir, filepath.Base(dir))
	if err != nil {
		t.Fatalf("type-checking %s: %v", dir, err)
	}
	out := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if ok && c.Exported() && c.Val().Kind() == constant.String {
			out[name] = constant.StringVal(c.Val())
		}
	}
	return out
}

// TestEveryNameHasADoc holds the tables to the packages: every exported
// string constant of keys and drain has exactly one Doc, with its value,
// and every Doc names such a constant. A new name without an entry fails
// here.
func TestEveryNameHasADoc(t *testing.T) {
	dirs := map[string]string{"keys": filepath.Join(root, "keys"), "drain": filepath.Join(root, "drain")}
	for _, p := range allDocs() {
		consts := stringConsts(t, dirs[p.pkg])
		if len(consts) == 0 {
			t.Fatalf("%s: no exported string constants found in %s", p.pkg, dirs[p.pkg])
		}
		seen := map[string]bool{}
		for _, d := range p.docs {
			v, ok := consts[d.Name]
			switch {
			case !ok:
				t.Errorf("%s.Docs: %q names no exported string constant of package %s", p.pkg, d.Name, p.pkg)
			case v != d.Value:
				t.Errorf("%s.Docs: %s's Value is %q, the constant is %q (Value: %s)", p.pkg, d.Name, d.Value, v, d.Name)
			}
			if seen[d.Name] {
				t.Errorf("%s.Docs: %s twice", p.pkg, d.Name)
			}
			seen[d.Name] = true
			if d.Kind == 0 || strings.TrimSpace(d.Means) == "" {
				t.Errorf("%s.Docs: %s needs a Kind and what it Means", p.pkg, d.Name)
			}
			if d.Kind == keys.KindEvent && d.By != "" && d.Type != "Normal" && d.Type != "Warning" {
				t.Errorf("%s.Docs: event reason %s needs Type Normal or Warning", p.pkg, d.Name)
			}
		}
		var missing []string
		for name := range consts {
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		slices.Sort(missing)
		for _, name := range missing {
			t.Errorf("%s.%s (%q) has no entry in %s.Docs (%s/docs.go): say what it means and what to do, then run make generate",
				p.pkg, name, consts[name], p.pkg, p.pkg)
		}
	}
}

// TestPageIsCurrent: docs/troubleshooting.md is what the generator writes.
func TestPageIsCurrent(t *testing.T) {
	want, err := render(allDocs())
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, Output))
	if err != nil {
		t.Fatalf("%v: run make generate (go run ./keys/cmd/gen-troubleshooting)", err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("%s is stale: run make generate (go run ./keys/cmd/gen-troubleshooting)", Output)
	}
}

// TestRenderRefusesAKindWithoutASection: a Doc of a kind the page has no
// section for fails the generator rather than vanishing from the page.
func TestRenderRefusesAKindWithoutASection(t *testing.T) {
	_, err := render([]pkgDocs{{"keys", []keys.Doc{{Name: "X", Value: "x", Kind: keys.Kind(999), Means: "m"}}}})
	if err == nil {
		t.Fatal("render accepted a kind without a section")
	}
}

func TestCode(t *testing.T) {
	for in, want := range map[string]string{
		"Ready":           "`Ready`",
		"onepool: ":       "` onepool:  `",
		"a`b":             "``a`b``",
		"onepool: gpu …":  "`onepool: gpu …`",
		"slurm.onepool.x": "`slurm.onepool.x`",
	} {
		if got := code(in); got != want {
			t.Errorf("code(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	a := anchorer{}
	for _, c := range []struct{ heading, want string }{
		{"Event reasons", "event-reasons"},
		{"DrainTimeout", "draintimeout"},
		{"onepool.dev/drain-applied", "onepooldevdrain-applied"},
		{"onepool: node cordoned[: <your words>]", "onepool-node-cordoned-your-words"},
		{"DrainTimeout", "draintimeout-1"},
		{"Ready", "ready"},
		{"Ready", "ready-1"},
	} {
		if got := a.of(c.heading); got != c.want {
			t.Errorf("anchor of %q = %q, want %q", c.heading, got, c.want)
		}
	}
}
