package houserules

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The limits of size that keep decisions readable. Raising one is a
// design decision: say why in the commit.
const (
	// maxFuncLines bounds a non-test function of production code, from its
	// func line to its closing brace. Longer ones are listed in
	// longFuncsFile with their length; the list may only shrink.
	maxFuncLines = 120
	// maxServePackageLines bounds pkg/serve's non-test Go: it wires a node;
	// features live in packages of their own.
	maxServePackageLines = 2300
)

// longFuncsFile lists the functions over maxFuncLines that are allowed
// for now, one "path:Func lines" a line (Func is Recv.Name for a method).
const longFuncsFile = "longfuncs.txt"

// productionDirs are the trees of production code, relative to root.
var productionDirs = []string{"cmd", "pkg", "election", "jetstream"}

// longFuncs returns every function of the production trees longer than
// maxFuncLines, by "path:Func", with its length.
func longFuncs(t *testing.T) map[string]int {
	t.Helper()
	var dirs []string
	for _, d := range productionDirs {
		if _, err := os.Stat(filepath.Join(root, d)); err == nil {
			dirs = append(dirs, d)
		}
	}
	fset := token.NewFileSet()
	out := map[string]int{}
	for _, p := range goFiles(t, dirs...) {
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n <= maxFuncLines {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			out[filepath.ToSlash(rel)+":"+name] = n
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

func readLongFuncs(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(longFuncsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, n, ok := strings.Cut(line, " ")
		lines, err := strconv.Atoi(n)
		if !ok || err != nil {
			t.Fatalf("%s: %q: want \"path:Func lines\"", longFuncsFile, line)
		}
		out[name] = lines
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// No function of production code is over maxFuncLines unless listed in
// longfuncs.txt, and none listed grows. The list may only shrink: an
// entry whose function is gone or now short enough must be removed, and
// one that got shorter must say its new length, so the list always
// describes the tree.
func TestFunctionLength(t *testing.T) {
	have, allowed := longFuncs(t), readLongFuncs(t)
	var names []string
	for n := range have {
		names = append(names, n)
	}
	sort.Strings(names)
	var listing strings.Builder
	for _, n := range names {
		fmt.Fprintf(&listing, "%s %d\n", n, have[n])
		max, ok := allowed[n]
		switch {
		case !ok:
			t.Errorf("%s is %d lines (at most %d): split it into steps with names, or, if it must be long, say why in the commit and list it in %s", n, have[n], maxFuncLines, longFuncsFile)
		case have[n] > max:
			t.Errorf("%s grew to %d lines (listed at %d in %s): a listed function may only get shorter", n, have[n], max, longFuncsFile)
		case have[n] < max:
			t.Errorf("%s is now %d lines: write its new length in %s (listed at %d), so it cannot grow back", n, have[n], longFuncsFile, max)
		}
	}
	for n := range allowed {
		if _, ok := have[n]; !ok {
			t.Errorf("%s is listed in %s but is no longer over %d lines (or is gone): remove it from the list", n, longFuncsFile, maxFuncLines)
		}
	}
	if t.Failed() {
		t.Logf("the functions over %d lines today:\n%s", maxFuncLines, listing.String())
	}
}

// pkg/serve wires a node; it may not grow past maxServePackageLines.
func TestServePackageSize(t *testing.T) {
	total := 0
	for _, p := range goFiles(t, "pkg/serve") {
		total += lines(t, p)
	}
	if total > maxServePackageLines {
		t.Errorf("pkg/serve's non-test Go is %d lines (at most %d): move a feature into a package of its own behind a named seam", total, maxServePackageLines)
	}
	t.Logf("pkg/serve: %d lines of non-test Go", total)
}
