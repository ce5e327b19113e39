package repocheck

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"os"
	"slices"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/tools/go/packages"
)

// statusEnums are the status enums of the API and every value each has.
var statusEnums = map[string]map[string]int32{
	"RunStatus":     curev1.RunStatus_value,
	"PhaseStatus":   curev1.PhaseStatus_value,
	"VerdictStatus": curev1.VerdictStatus_value,
}

const apiPath = "github.com/cure-oss/cure/api/curev1"

// TestStatusEnumsExhaustive type-checks the repository and fails on every
// switch over a status enum (api/curev1 RunStatus, PhaseStatus,
// VerdictStatus) that does not name every value of the enum, the
// unspecified one included: a status added to the proto then shows here
// wherever it must be handled. A default clause may follow (for values a
// newer peer sends) but never stands in for a value.
func TestStatusEnumsExhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the whole repository")
	}
	root := repoRoot(t)
	t.Run("the walk finds a missing value", func(t *testing.T) {
		// A probe package (an overlay: never on disk) with one switch
		// that forgets values and one that names them all.
		probe := root + "/qemu-test/repocheck/enumprobe/probe.go"
		src := `package enumprobe

import curev1 "` + apiPath + `"

func partial(s curev1.RunStatus) int {
	switch s {
	case curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_PENDING:
		return 1
	default:
		return 0
	}
}

func whole(s curev1.PhaseStatus) int {
	switch s {
	case curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED, curev1.PhaseStatus_PHASE_OK, curev1.PhaseStatus_PHASE_SKIPPED,
		curev1.PhaseStatus_PHASE_FAILED, curev1.PhaseStatus_PHASE_RUNNING:
		return 1
	}
	return 0
}
`
		findings, n := enumSwitches(t, root, map[string][]byte{probe: []byte(src)}, "./qemu-test/repocheck/enumprobe")
		want := "qemu-test/repocheck/enumprobe/probe.go:6: switch over RunStatus does not handle RUN_ATTENTION, RUN_CANCELED, RUN_FAILED, RUN_STATUS_UNSPECIFIED, RUN_SUCCEEDED"
		if n != 2 || len(findings) != 1 || findings[0] != want {
			t.Errorf("probe: %d switches, findings %q; want 2 switches and %q", n, findings, want)
		}
	})
	findings, n := enumSwitches(t, root, nil, "./...")
	for _, f := range findings {
		t.Error(f)
	}
	if n == 0 {
		t.Fatal("no switch over a status enum found: the walk reads nothing")
	}
	t.Logf("%d switches over status enums, each handles every value", n)
}

// enumSwitches type-checks the packages of patterns (tests included) and
// reports each switch over a status enum that misses a value, and how many
// such switches there are.
func enumSwitches(t *testing.T, root string, overlay map[string][]byte, patterns ...string) (findings []string, switches int) {
	t.Helper()
	cfg := &packages.Config{Dir: root, Tests: true, Env: append(os.Environ(), "CGO_ENABLED=0"), Overlay: overlay,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{} // a file is in a package and its test variant
	for _, p := range pkgs {
		if p.TypesInfo == nil || !importsAPI(p) {
			continue
		}
		for _, f := range p.Syntax {
			name := p.Fset.Position(f.Pos()).Filename
			if seen[name] {
				continue
			}
			seen[name] = true
			ast.Inspect(f, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok || sw.Tag == nil {
					return true
				}
				enum := statusEnum(p.TypesInfo.TypeOf(sw.Tag))
				if enum == "" {
					return true
				}
				switches++
				if missing := missingValues(p.TypesInfo, sw, enum); len(missing) > 0 {
					pos := p.Fset.Position(sw.Pos())
					findings = append(findings, fmt.Sprintf("%s:%d: switch over %s does not handle %s",
						strings.TrimPrefix(pos.Filename, root+"/"), pos.Line, enum, strings.Join(missing, ", ")))
				}
				return true
			})
		}
	}
	return findings, switches
}

func importsAPI(p *packages.Package) bool {
	if p.PkgPath == apiPath {
		return false // the generated code itself
	}
	_, ok := p.Imports[apiPath]
	return ok
}

// statusEnum is the name of the status enum t is ("" if none).
func statusEnum(t types.Type) string {
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != apiPath {
		return ""
	}
	if _, ok := statusEnums[n.Obj().Name()]; !ok {
		return ""
	}
	return n.Obj().Name()
}

// missingValues are the enum's value names no case of sw lists.
func missingValues(info *types.Info, sw *ast.SwitchStmt, enum string) []string {
	handled := map[int64]bool{}
	for _, st := range sw.Body.List {
		for _, e := range st.(*ast.CaseClause).List {
			if tv, ok := info.Types[e]; ok && tv.Value != nil {
				if v, exact := constant.Int64Val(tv.Value); exact {
					handled[v] = true
				}
			}
		}
	}
	var missing []string
	for name, v := range statusEnums[enum] {
		if !handled[int64(v)] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}
