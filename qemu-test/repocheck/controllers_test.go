package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxControllerMethods bounds the methods declared on one type of the
// coordinator's pipeline and the packages cut from it: a type with more
// holds several areas' state together (cut it along that state into
// controllers, as pipeline.Engine was).
const maxControllerMethods = 20

// controllerPackages are the pipeline and the packages cut from it.
var controllerPackages = []string{"provisioner-lite/pipeline", "provisioner-lite/bootgate"}

// TestControllersSmall parses controllerPackages and fails naming every type
// with maxControllerMethods declared methods or more (pointer and value
// receivers counted together; test files left out).
func TestControllersSmall(t *testing.T) {
	root := repoRoot(t)
	type typeCount struct {
		name string
		n    int
	}
	var all []typeCount
	engine := false
	for _, pkg := range controllerPackages {
		counts := methodCounts(t, filepath.Join(root, filepath.FromSlash(pkg)))
		if len(counts) == 0 {
			t.Fatalf("no methods found in %s", pkg)
		}
		for typ, n := range counts {
			engine = engine || pkg == "provisioner-lite/pipeline" && typ == "Engine"
			all = append(all, typeCount{pkg + "." + typ, n})
			if n >= maxControllerMethods {
				t.Errorf("%s.%s has %d methods, the bound is under %d: cut it along its state into controllers", pkg, typ, n, maxControllerMethods)
			}
		}
	}
	if !engine {
		t.Fatal("pipeline.Engine not found: the parse is wrong")
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].name < all[j].name })
	for _, tc := range all[:min(5, len(all))] {
		t.Logf("%s: %d methods", tc.name, tc.n)
	}
}

// methodCounts counts the methods declared on each type of the non-test
// files in dir.
func methodCounts(t *testing.T, dir string) map[string]int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	counts := map[string]int{}
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".go") || strings.HasSuffix(ent.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, ent.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && len(fd.Recv.List) > 0 {
				counts[recvTypeName(fd.Recv.List[0].Type)]++
			}
		}
	}
	return counts
}

// recvTypeName is a receiver's type name: T of T, *T, T[P] and *T[P].
func recvTypeName(x ast.Expr) string {
	for {
		switch v := x.(type) {
		case *ast.StarExpr:
			x = v.X
		case *ast.IndexExpr:
			x = v.X
		case *ast.IndexListExpr:
			x = v.X
		case *ast.ParenExpr:
			x = v.X
		case *ast.Ident:
			return v.Name
		default:
			return "?"
		}
	}
}
