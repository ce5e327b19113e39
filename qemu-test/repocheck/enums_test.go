package repocheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/cure-oss/cure"

// probePkg is the package whose switches the test knows the verdict on
// (testdata: outside ./..., named explicitly).
const probePkg = "./qemu-test/repocheck/testdata/enumprobe"

// TestEnumsExhaustive runs the exhaustive analyzer
// (github.com/nishanths/exhaustive, a tool of go.mod) through go vet over
// every package of the module, tests included, and fails on every switch
// over an enum of this module (the proto enums of api/curev1 and the
// const-iota and typed-string enums of every package) that does not list
// every value. A default clause may follow, for values a newer peer sends,
// but never stands in for a value (the analyzer's default policy, kept): a
// value added to an enum then shows here wherever it must be handled.
// Other modules' enums (yaml node kinds, gRPC codes, errnos) are not ours
// to enumerate: a switch may pick the few it cares about.
func TestEnumsExhaustive(t *testing.T) {
	root := repoRoot(t)
	statSources(t, root)
	findings, err := exhaustiveFindings(root, "./...", probePkg)
	if err != nil {
		t.Fatal(err)
	}
	var probe []string
	byPkg := map[string][]string{}
	for _, f := range findings {
		if strings.HasPrefix(f.file, strings.TrimPrefix(probePkg, "./")+"/") {
			probe = append(probe, fmt.Sprintf("%s:%d %s", path.Base(f.file), f.line, f.typ))
			continue
		}
		dir := path.Dir(f.file)
		byPkg[dir] = append(byPkg[dir], fmt.Sprintf("%s:%d: switch over %s misses %s", f.file, f.line, f.typ, f.missing))
	}
	// The analyzer ran and judged as this test says: the default clause
	// and the foreign enum are treated as documented.
	if want := []string{"probe.go:21 curev1.RunStatus", "probe.go:31 enumprobe.color"}; !slices.Equal(probe, want) {
		t.Errorf("probe findings %q, want %q", probe, want)
	}
	dirs := make([]string, 0, len(byPkg))
	for d := range byPkg {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		t.Errorf("package %s: %d switch(es) over an enum miss values (list them; a default may stay for unknown ones):\n\t%s",
			d, len(byPkg[d]), strings.Join(byPkg[d], "\n\t"))
	}
}

type enumFinding struct {
	file         string // relative to the module root
	line         int
	typ, missing string
}

// missingRE is the analyzer's one diagnostic for a switch.
var missingRE = regexp.MustCompile(`^(\S+\.go):(\d+):\d+: missing cases in switch of type (\S+): (.*)$`)

// exhaustiveFindings runs go vet with the exhaustive analyzer over
// patterns. Any output that is not a finding (a package that does not
// compile) is an error: an unchecked package must not pass silently.
func exhaustiveFindings(root string, patterns ...string) ([]enumFinding, error) {
	tool := exec.Command("go", "tool", "-n", "exhaustive")
	tool.Dir = root
	bin, err := tool.Output()
	if err != nil {
		return nil, fmt.Errorf("building the exhaustive analyzer (go tool -n exhaustive): %w", err)
	}
	args := append([]string{"vet", "-vettool=" + strings.TrimSpace(string(bin)),
		"-check=switch", "-ignore-enum-types=" + notUnder(modulePath+"/")}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, runErr := cmd.CombinedOutput()
	var findings []enumFinding
	var other []string
	seen := map[string]bool{} // a package and its test variant report the same switch
	for _, l := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		m := missingRE.FindStringSubmatch(l)
		switch {
		case m != nil && seen[m[1]+":"+m[2]]:
		case m != nil:
			seen[m[1]+":"+m[2]] = true
			line, _ := strconv.Atoi(m[2]) // \d+
			findings = append(findings, enumFinding{file: m[1], line: line, typ: m[3], missing: m[4]})
		case l == "" || strings.HasPrefix(l, "# "):
		default:
			other = append(other, l)
		}
	}
	if len(other) > 0 {
		return nil, fmt.Errorf("go vet -vettool=exhaustive could not check every package (%v):\n%s", runErr, strings.Join(other, "\n"))
	}
	if runErr != nil && len(findings) == 0 {
		return nil, fmt.Errorf("go vet -vettool=exhaustive: %w\n%s", runErr, out)
	}
	return findings, nil
}

// notUnder is a regexp (RE2: no lookahead) matching every fully qualified
// type name whose package path does not start with prefix.
func notUnder(prefix string) string {
	alts := make([]string, 0, len(prefix))
	for i := range len(prefix) {
		// Equal up to i, another byte at i ("syscall.Errno" differs at 0).
		alts = append(alts, regexp.QuoteMeta(prefix[:i])+"[^"+regexp.QuoteMeta(prefix[i:i+1])+"]")
	}
	return "^(" + strings.Join(alts, "|") + ")"
}

// statSources stats every Go file and go.mod: go vet reads them in another
// process, which go test's result cache does not see, and a cached pass
// must not outlive a change to any of them.
func statSources(t *testing.T, root string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	for _, d := range goPackageDirs(t, root) {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".go") {
				if _, err := os.Stat(filepath.Join(root, d, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
