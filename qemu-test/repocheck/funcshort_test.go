package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFunc bounds every non-test, non-generated function of the module, in
// lines from `func` to its closing brace: past it a function is doing
// several things, and a named helper per thing reads better than a scroll.
const maxFunc = 100

// TestFunctionsShort walks the whole module and fails naming each non-test
// function longer than maxFunc lines.
func TestFunctionsShort(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	files, funcs := 0, 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDirForFuncLen(p, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		funcs += reportLongFuncs(t, root, fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 || funcs < 500 {
		t.Fatalf("found only %d files and %d functions under %s: the walk is wrong", files, funcs, root)
	}
	t.Logf("%d files, %d functions", files, funcs)
}

// skipDirForFuncLen says whether the walk leaves a directory out: build
// output, caches, vendored code, hidden directories, test data, and any
// nested module (not this module's code).
func skipDirForFuncLen(p, name string) bool {
	switch {
	case strings.HasPrefix(name, "."), name == "out", name == "vendor", name == "testdata":
		return true
	}
	_, err := os.Stat(filepath.Join(p, "go.mod"))
	return err == nil
}

// reportLongFuncs fails t for each function of f over maxFunc lines and
// returns how many functions f has.
func reportLongFuncs(t *testing.T, root string, fset *token.FileSet, f *ast.File) int {
	t.Helper()
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n++
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		lines := end.Line - start.Line + 1
		if lines > maxFunc {
			rel, err := filepath.Rel(root, start.Filename)
			if err != nil {
				rel = start.Filename
			}
			t.Errorf("%s:%d: %s is %d lines, over %d: extract helpers named for what they do", filepath.ToSlash(rel), start.Line, funcName(fd), lines, maxFunc)
		}
	}
	return n
}
