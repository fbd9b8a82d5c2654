// Package houserules checks the shape of the repository that docs/map.md
// describes, so that it cannot drift back by accident: files of one
// concept, a message's way through named seams rather than func-typed
// fields, wiring kept small, a configuration that describes the parts
// without depending on them, and time waited on through one clock.
package houserules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, two levels above this package.
const root = "../.."

// The limits. Raising one is a design decision: say why in the commit.
const (
	maxFileLines      = 700 // a non-test Go file outside test/
	maxServeLines     = 400 // pkg/serve/serve.go: wiring only
	maxFuncTypeFields = 20  // func-typed fields of non-test structs in pkg/, election/, jetstream/
)

// goFiles lists the non-test Go files under dirs (relative to root).
func goFiles(t *testing.T, dirs ...string) []string {
	t.Helper()
	var files []string
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func lines(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestNoFileOverTheLimit(t *testing.T) {
	for _, p := range goFiles(t, "cmd", "election", "jetstream", "pkg", "internal") {
		if n := lines(t, p); n > maxFileLines {
			t.Errorf("%s has %d lines (at most %d): split it by concept", p, n, maxFileLines)
		}
	}
	if n := lines(t, filepath.Join(root, "pkg/serve/serve.go")); n > maxServeLines {
		t.Errorf("pkg/serve/serve.go has %d lines (at most %d): serve only wires; move logic to the part it belongs to", n, maxServeLines)
	}
}

// funcTypeFields lists every field of a struct type declared in files
// whose type is a func type, or a named func type declared in files.
func funcTypeFields(t *testing.T, files []string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	named := map[string]bool{}
	for _, p := range files {
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, ok := ts.Type.(*ast.FuncType); ok {
					named[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	var out []string
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				isFunc := false
				switch ft := fl.Type.(type) {
				case *ast.FuncType:
					isFunc = true
				case *ast.Ident:
					isFunc = named[ft.Name]
				case *ast.SelectorExpr:
					isFunc = named[ft.Sel.Name]
				}
				if !isFunc {
					continue
				}
				names := []string{"(embedded)"}
				if len(fl.Names) > 0 {
					names = names[:0]
					for _, id := range fl.Names {
						names = append(names, id.Name)
					}
				}
				for _, nm := range names {
					out = append(out, fset.Position(fl.Pos()).String()+" "+nm)
				}
			}
			return true
		})
	}
	return out
}

// A message's way runs through named interfaces; what func-typed fields
// remain are documented hooks (clocks for tests, options), not the data
// path.
func TestFewFuncTypedFields(t *testing.T) {
	fields := funcTypeFields(t, goFiles(t, "pkg", "election", "jetstream"))
	if len(fields) > maxFuncTypeFields {
		t.Errorf("%d func-typed struct fields (at most %d); make the new ones small interfaces defined by their caller:\n%s",
			len(fields), maxFuncTypeFields, strings.Join(fields, "\n"))
	}
	t.Logf("%d func-typed struct fields:\n%s", len(fields), strings.Join(fields, "\n"))
}

// pkg/config describes the parts; it must not depend on them.
func TestConfigImportsNoPart(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range goFiles(t, "pkg/config") {
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			for _, part := range []string{"/pkg/ai", "/pkg/worker", "/pkg/pusher", "/pkg/access", "/pkg/dispatch", "/pkg/serve"} {
				if strings.HasSuffix(path, part) {
					t.Errorf("%s imports %s: pkg/config describes the parts, it does not depend on them", p, path)
				}
			}
		}
	}
}

// timeWaits are the time package's functions that wait on the machine's
// clock, which a test cannot step.
var timeWaits = map[string]bool{"NewTimer": true, "NewTicker": true, "After": true, "AfterFunc": true, "Sleep": true, "Tick": true}

// Production code waits through pkg/clock, so that a test can step time
// instead of sleeping; only pkg/clock (the real clock) and pkg/pause
// touch the time package's timers.
func TestWaitsGoThroughTheClock(t *testing.T) {
	var dirs []string
	for _, d := range []string{"cmd", "pkg", "election", "jetstream"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			dirs = append(dirs, d)
		}
	}
	fset := token.NewFileSet()
	for _, p := range goFiles(t, dirs...) {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "pkg/clock/") || strings.HasPrefix(rel, "pkg/pause/") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		name := "" // the time package's name in f
		for _, imp := range f.Imports {
			if path := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(path, "k8s.io/utils/clock") {
				t.Errorf("%s imports %s: import botctl's pkg/clock, which names its types", p, path)
			}
			if strings.Trim(imp.Path.Value, `"`) == "time" {
				name = "time"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" || name == "_" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && x.Obj == nil && timeWaits[sel.Sel.Name] {
				t.Errorf("%s: time.%s waits on the machine's clock: wait through a clock.Clock (pkg/clock; a Clock field, nil meaning clock.Real) so that tests can step it",
					fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

// doubling finds a hand-written exponential backoff: a wait doubled and
// capped in one expression (min(2*wait, max), min(wait*2, max)).
var doubling = regexp.MustCompile(`min\(\s*(2\s*\*\s*\*?\w+|\*?\w+\s*\*\s*2)\s*,`)

// Retries wait on pkg/retry's backoff with jitter, not on a hand-written
// doubling: callers failing together must not retry in step, and one
// helper keeps the rule (a wait between half and all of its step) in one
// place.
func TestRetriesUseOneBackoff(t *testing.T) {
	var dirs []string
	for _, d := range []string{"cmd", "pkg", "election", "jetstream"} {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			dirs = append(dirs, d)
		}
	}
	for _, p := range goFiles(t, dirs...) {
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(filepath.ToSlash(rel), "pkg/retry/") {
			continue
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if code, _, _ := strings.Cut(line, "//"); doubling.MatchString(code) {
				t.Errorf("%s:%d: a hand-written doubling backoff (%s): use pkg/retry (retry.New, Next, Reset; or retry.Until)", rel, i+1, strings.TrimSpace(code))
			}
		}
	}
}

// botctl's etcd paths are spelled in pkg/etcdkeys only: a string literal
// that is a "/botctl…" path anywhere else in production code is a second
// spelling of the layout.
func TestEtcdKeysSpelledOnce(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range goFiles(t, "cmd", "pkg", "election", "jetstream") {
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(filepath.ToSlash(rel), "pkg/etcdkeys/") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.HasPrefix(strings.Trim(lit.Value, "`\""), "/botctl") {
				t.Errorf("%s: %s spells an etcd path: name it in pkg/etcdkeys", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
	}
}

// nats.go's JetStream package is imported as natsjs wherever it is
// imported: the data plane's own package is called jetstream, and one
// name for each keeps a reader from confusing the two.
func TestNatsJetStreamImportedAsNatsjs(t *testing.T) {
	fset := token.NewFileSet()
	var files []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range files { // tests too
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) != "github.com/nats-io/nats.go/jetstream" {
				continue
			}
			if imp.Name == nil || imp.Name.Name != "natsjs" {
				t.Errorf("%s: nats.go's jetstream imported without the natsjs alias", fset.Position(imp.Pos()))
			}
		}
	}
}
