package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxPipelineFunc bounds a function of the coordinator's pipeline, in lines
// from its signature to its closing brace: a longer one has grown a
// decision and its doing together (decide in a pure function, apply in a
// small one).
const maxPipelineFunc = 80

// TestPipelineFunctionsShort parses provisioner-lite/pipeline and fails on
// every function of its non-test files of maxPipelineFunc lines or more.
func TestPipelineFunctionsShort(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "provisioner-lite", "pipeline")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	longest, funcs := 0, 0
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".go") || strings.HasSuffix(ent.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, ent.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			n := end.Line - start.Line + 1
			longest = max(longest, n)
			if n >= maxPipelineFunc {
				t.Errorf("%s:%d: %s is %d lines, the pipeline's bound is under %d: split the decision from the doing", ent.Name(), start.Line, funcName(fd), n, maxPipelineFunc)
			}
		}
	}
	if funcs == 0 {
		t.Fatalf("no functions found in %s", dir)
	}
	t.Logf("%d functions, the longest %d lines", funcs, longest)
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
